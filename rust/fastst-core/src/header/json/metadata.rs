//! `__metadata__`: `null` (absent) or an object mapping strings to strings,
//! each key once.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::{reject_containers, Ctx, Found};
use crate::error::Error;
use crate::validate::found;

pub(super) struct MetadataSeed<'c> {
    pub(super) ctx: &'c Ctx,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object mapping strings to strings")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::boolean(v),
        }))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::string(v),
        }))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::LIST.to_owned(),
        }))
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(self.ctx.fail(Error::DuplicateMetadataKey { key }));
            }
            let value = map.next_value_seed(MetadataValueSeed {
                ctx: self.ctx,
                key: &key,
            })?;
            out.push((key, value));
        }
        Ok(Some(out))
    }
}

struct MetadataValueSeed<'c, 'k> {
    ctx: &'c Ctx,
    key: &'k str,
}

impl MetadataValueSeed<'_, '_> {
    fn not_string<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(Error::MetadataValueNotString {
            key: self.key.to_owned(),
            found: found.0,
        })
    }
}

impl<'de> DeserializeSeed<'de> for MetadataValueSeed<'_, '_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataValueSeed<'_, '_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
        Ok(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::boolean(v))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::NULL.to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.not_string(f));
}
