//! One store per bucket or server and settings, kept for the process: the
//! objects of a checkpoint (an index's shards, a prefix's listing and what
//! it names) share one client, its connections and its credentials,
//! instead of making a client, a pool of sockets and a token each.
//!
//! A store is kept under what decides it: the URL's scheme, user part,
//! host and port, its first path segment (the bucket or container of
//! path-style URLs), its query (a presigned URL's signature), the
//! `storage_options` and the store variables of the environment
//! (`AWS_*`, `GOOGLE_*`, `AZURE_*`), so that a change of any of them makes
//! a new one. At most [`KEPT`] stores are kept; past that the oldest are
//! dropped (their objects keep theirs alive).

use std::sync::{Arc, Mutex, PoisonError};

use object_store::list::PaginatedListStore;
use object_store::multipart::MultipartStore;
use object_store::ObjectStore;
use url::Url;

/// Stores kept at most.
pub(crate) const KEPT: usize = 64;

/// A store: its objects, its listing page by page where it lists, and its
/// multipart uploads by part number where it takes them.
#[derive(Clone)]
pub(crate) struct Store {
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) pages: Option<Arc<dyn PaginatedListStore>>,
    /// Parts uploaded under numbers of the caller's choosing, in any order
    /// (`ObjectStore::put_multipart` numbers them in the order sent).
    pub(crate) parts: Option<Arc<dyn MultipartStore>>,
}

impl Store {
    /// A cloud store (S3, GCS, Azure): reads objects, lists by pages,
    /// takes multipart uploads part by part.
    pub(crate) fn cloud<S: ObjectStore + PaginatedListStore + MultipartStore>(
        store: Arc<S>,
    ) -> Store {
        Store {
            objects: store.clone(),
            pages: Some(store.clone()),
            parts: Some(store),
        }
    }

    /// A store that cannot list nor take uploads by part (plain HTTP).
    pub(crate) fn objects_only(store: Arc<dyn ObjectStore>) -> Store {
        Store {
            objects: store,
            pages: None,
            parts: None,
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("objects", &self.objects)
            .field("lists", &self.pages.is_some())
            .field("parts", &self.parts.is_some())
            .finish()
    }
}

/// What decides the store of `parsed` configured by `options` (see the
/// module's documentation), as one string.
pub(crate) fn key(parsed: &Url, options: &[(String, String)]) -> String {
    let mut parts = vec![
        parsed.scheme().to_owned(),
        parsed.username().to_owned(),
        parsed.password().unwrap_or_default().to_owned(),
        parsed.host_str().unwrap_or_default().to_owned(),
        parsed.port().map(|p| p.to_string()).unwrap_or_default(),
        parsed
            .path_segments()
            .and_then(|mut s| s.next())
            .unwrap_or_default()
            .to_owned(),
        parsed.query().unwrap_or_default().to_owned(),
    ];
    for (k, v) in options {
        parts.push(format!("{}={v}", k.to_ascii_lowercase()));
    }
    let mut env: Vec<String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    parts.extend(env);
    parts.join("\0")
}

/// The stores made so far, oldest first.
static KEPT_STORES: Mutex<Vec<(String, Store)>> = Mutex::new(Vec::new());

/// The store kept under `key`, or the one `make` makes (then kept).
pub(crate) fn get_or_build<E>(
    key: String,
    make: impl FnOnce() -> Result<Store, E>,
) -> Result<Store, E> {
    let kept = |k: &str| {
        let stores = KEPT_STORES.lock().unwrap_or_else(PoisonError::into_inner);
        stores.iter().find(|(s, _)| s == k).map(|(_, s)| s.clone())
    };
    if let Some(store) = kept(&key) {
        return Ok(store);
    }
    // Made without the lock (a client is slow to make); the first one
    // kept wins a race.
    let made = make()?;
    let mut stores = KEPT_STORES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, store)) = stores.iter().find(|(s, _)| *s == key) {
        return Ok(store.clone());
    }
    if stores.len() >= KEPT {
        stores.remove(0);
    }
    stores.push((key, made.clone()));
    Ok(made)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[test]
    fn one_store_per_key_and_no_more_than_kept() {
        let made = std::cell::Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            Ok::<_, ()>(Store::objects_only(Arc::new(InMemory::new())))
        };
        let a = get_or_build("test-a".into(), make).unwrap();
        let again = get_or_build("test-a".into(), make).unwrap();
        assert!(Arc::ptr_eq(&a.objects, &again.objects));
        assert_eq!(made.get(), 1);
        for i in 0..KEPT {
            get_or_build(format!("test-fill-{i}"), make).unwrap();
        }
        let fresh = get_or_build("test-a".into(), make).unwrap();
        assert!(!Arc::ptr_eq(&a.objects, &fresh.objects));
    }

    #[test]
    fn keys_tell_buckets_servers_and_settings_apart() {
        let k = |url: &str, opts: &[(&str, &str)]| {
            let opts: Vec<(String, String)> = opts
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            key(&Url::parse(url).unwrap(), &opts)
        };
        let base = k("s3://b/dir/x.safetensors", &[]);
        assert_eq!(base, k("s3://b/dir/y.safetensors", &[]));
        for other in [
            k("s3://c/dir/x.safetensors", &[]),
            k("gs://b/dir/x.safetensors", &[]),
            k("s3://b/dir/x.safetensors", &[("region", "x")]),
            k("https://h/b/x", &[]),
            k("https://h/c/x", &[]),
            k("https://h:8/b/x", &[]),
            k("https://u@h/b/x", &[]),
            k("https://h/b/x?sig=1", &[]),
        ] {
            assert_ne!(base, other);
        }
        assert_ne!(k("https://h/b/x", &[]), k("https://h/b/x?sig=1", &[]));
    }
}
