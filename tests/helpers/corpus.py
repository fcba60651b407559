"""A named corpus of malformed files, one per format rule, each with the
exception class and rule id it must fail with; and valid edge cases the
reader must accept."""

from __future__ import annotations

import struct
from typing import List, NamedTuple

from helpers.raw_files import framed, raw_file

F32_4 = ("F32", [4], bytes(16))


def entry(dtype: str = "F32", shape: str = "[1]", offsets: str = "[0,4]", extra: str = "") -> str:
    return f'{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}{extra}}}'


class Bad(NamedTuple):
    name: str
    content: bytes
    error: str  # class name in fastst
    rule: str
    tensor: object = None


def one(value: str, data: bytes = bytes(4), name: str = "t") -> bytes:
    return framed(f'{{"{name}":{value}}}', data)


MALFORMED: List[Bad] = [
    # framing
    Bad("empty-file", b"", "HeaderFramingError", "file-too-short"),
    Bad("seven-bytes", b"\x01\x00\x00\x00\x00\x00\x00", "HeaderFramingError", "file-too-short"),
    Bad("length-zero", struct.pack("<Q", 0) + b"{}", "HeaderFramingError", "header-length-zero"),
    Bad(
        "length-over-cap",
        struct.pack("<Q", 100_000_001) + b"{}",
        "HeaderFramingError",
        "header-too-large",
    ),
    Bad(
        "length-u64-max",
        struct.pack("<Q", 2**64 - 1) + b"{}",
        "HeaderFramingError",
        "header-too-large",
    ),
    Bad(
        "length-past-end",
        struct.pack("<Q", 64) + b"{}      ",
        "HeaderFramingError",
        "header-past-end",
    ),
    Bad("invalid-utf8", framed(b'{"\xff\xfe":1}'), "HeaderFramingError", "header-not-utf8"),
    Bad("bom", framed("\ufeff{}"), "HeaderFramingError", "header-start"),
    Bad("top-level-list", framed("[]"), "HeaderFramingError", "header-start"),
    Bad("top-level-string", framed('"x"'), "HeaderFramingError", "header-start"),
    # strict JSON
    Bad("nul-padding", struct.pack("<Q", 8) + b"{}\0\0\0\0\0\0", "HeaderJsonError", "json-syntax"),
    Bad(
        "comment", framed('{/*c*/"t":' + entry() + "}", bytes(4)), "HeaderJsonError", "json-syntax"
    ),
    Bad(
        "trailing-comma",
        framed('{"t":' + entry() + ",}", bytes(4)),
        "HeaderJsonError",
        "json-syntax",
    ),
    Bad("nan-shape", one(entry(shape="[NaN]")), "HeaderJsonError", "json-syntax"),
    Bad("single-quotes", framed("{'t':1}"), "HeaderJsonError", "json-syntax"),
    Bad("unterminated", framed('{"t":'), "HeaderJsonError", "json-syntax"),
    Bad("garbage-after", framed("{} {}"), "HeaderJsonError", "json-syntax"),
    Bad(
        "deep-nesting",
        one(entry(extra=',"x":' + "[" * 5000 + "]" * 5000)),
        "HeaderJsonError",
        "json-too-deep",
    ),
    # duplicates
    Bad(
        "duplicate-tensor",
        framed('{"t":' + entry() + ',"t":' + entry(offsets="[4,8]") + "}", bytes(8)),
        "HeaderJsonError",
        "duplicate-tensor",
        "t",
    ),
    Bad(
        "duplicate-tensor-escaped",
        framed('{"t":' + entry() + ',"\\u0074":' + entry(offsets="[4,8]") + "}", bytes(8)),
        "HeaderJsonError",
        "duplicate-tensor",
        "t",
    ),
    Bad(
        "duplicate-metadata",
        framed('{"__metadata__":{},"__metadata__":{}}'),
        "MetadataError",
        "duplicate-metadata",
    ),
    Bad(
        "duplicate-metadata-key",
        framed('{"__metadata__":{"a":"1","a":"2"}}'),
        "MetadataError",
        "duplicate-metadata-key",
    ),
    Bad(
        "duplicate-field",
        one('{"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]}'),
        "TensorTableError",
        "duplicate-field",
        "t",
    ),
    # metadata
    Bad("metadata-list", framed('{"__metadata__":["a"]}'), "MetadataError", "metadata-not-map"),
    Bad("metadata-number", framed('{"__metadata__":1}'), "MetadataError", "metadata-not-map"),
    Bad("metadata-float", framed('{"__metadata__":1.5}'), "MetadataError", "metadata-not-map"),
    Bad("metadata-negative", framed('{"__metadata__":-1}'), "MetadataError", "metadata-not-map"),
    Bad("metadata-true", framed('{"__metadata__":true}'), "MetadataError", "metadata-not-map"),
    Bad("metadata-false", framed('{"__metadata__":false}'), "MetadataError", "metadata-not-map"),
    Bad(
        "metadata-bool-value",
        framed('{"__metadata__":{"a":true}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    Bad(
        "metadata-negative-value",
        framed('{"__metadata__":{"a":-1}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    Bad(
        "metadata-float-value",
        framed('{"__metadata__":{"a":2.5}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    Bad(
        "metadata-int-value",
        framed('{"__metadata__":{"a":1}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    Bad(
        "metadata-nested",
        framed('{"__metadata__":{"a":{"b":"c"}}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    Bad(
        "metadata-null-value",
        framed('{"__metadata__":{"a":null}}'),
        "MetadataError",
        "metadata-value-not-string",
    ),
    # entries
    Bad("entry-number", one("1"), "TensorTableError", "entry-not-object", "t"),
    Bad("entry-list", one("[]"), "TensorTableError", "entry-not-object", "t"),
    Bad(
        "missing-dtype",
        one('{"shape":[1],"data_offsets":[0,4]}'),
        "TensorTableError",
        "missing-field",
        "t",
    ),
    Bad(
        "missing-shape",
        one('{"dtype":"F32","data_offsets":[0,4]}'),
        "TensorTableError",
        "missing-field",
        "t",
    ),
    Bad(
        "missing-offsets",
        one('{"dtype":"F32","shape":[1]}'),
        "TensorTableError",
        "missing-field",
        "t",
    ),
    Bad(
        "dtype-number",
        one('{"dtype":32,"shape":[1],"data_offsets":[0,4]}'),
        "TensorTableError",
        "wrong-field-type",
        "t",
    ),
    Bad("shape-string", one(entry(shape='"1"')), "TensorTableError", "wrong-field-type", "t"),
    Bad("shape-object", one(entry(shape="{}")), "TensorTableError", "wrong-field-type", "t"),
    Bad("dtype-lowercase", one(entry(dtype="f32")), "TensorTableError", "unknown-dtype", "t"),
    Bad("dtype-unknown", one(entry(dtype="Q4_K")), "TensorTableError", "unknown-dtype", "t"),
    Bad("shape-negative", one(entry(shape="[-1]")), "TensorTableError", "bad-shape-entry", "t"),
    Bad("shape-float", one(entry(shape="[1.0]")), "TensorTableError", "bad-shape-entry", "t"),
    Bad(
        "shape-2-63",
        one(entry(shape="[9223372036854775808]")),
        "TensorTableError",
        "bad-shape-entry",
        "t",
    ),
    Bad("shape-huge", one(entry(shape="[1e300]")), "TensorTableError", "bad-shape-entry", "t"),
    Bad(
        "shape-string-entry", one(entry(shape='["1"]')), "TensorTableError", "bad-shape-entry", "t"
    ),
    Bad("offsets-one", one(entry(offsets="[4]")), "TensorTableError", "bad-offsets", "t"),
    Bad("offsets-three", one(entry(offsets="[0,4,4]")), "TensorTableError", "bad-offsets", "t"),
    Bad("offsets-negative", one(entry(offsets="[-4,4]")), "TensorTableError", "bad-offsets", "t"),
    Bad("offsets-float", one(entry(offsets="[0,4.5]")), "TensorTableError", "bad-offsets", "t"),
    Bad("offsets-object", one(entry(offsets="{}")), "TensorTableError", "bad-offsets", "t"),
    # sizes
    Bad(
        "size-overflow",
        one(entry(shape="[4611686018427387904,4611686018427387904]")),
        "TensorTableError",
        "size-overflow",
        "t",
    ),
    Bad(
        "size-overflow-bytes",
        one(entry(dtype="F64", shape="[4611686018427387904]")),
        "TensorTableError",
        "size-overflow",
        "t",
    ),
    Bad(
        "f4-odd",
        one(entry(dtype="F4", shape="[3]", offsets="[0,2]"), bytes(2)),
        "TensorTableError",
        "sub-byte-not-whole",
        "t",
    ),
    Bad(
        "f6-two",
        one(entry(dtype="F6_E3M2", shape="[2]", offsets="[0,2]"), bytes(2)),
        "TensorTableError",
        "sub-byte-not-whole",
        "t",
    ),
    Bad(
        "byte-length-short",
        one(entry(shape="[2]", offsets="[0,4]")),
        "TensorTableError",
        "byte-length-mismatch",
        "t",
    ),
    Bad(
        "byte-length-long",
        one(entry(shape="[1]", offsets="[0,8]"), bytes(8)),
        "TensorTableError",
        "byte-length-mismatch",
        "t",
    ),
    # layout
    Bad(
        "offsets-reversed",
        one(entry(shape="[0]", offsets="[4,0]")),
        "LayoutError",
        "offsets-reversed",
        "t",
    ),
    Bad(
        "hole-at-start",
        framed('{"t":' + entry(offsets="[4,8]") + "}", bytes(8)),
        "LayoutError",
        "hole",
        "t",
    ),
    Bad(
        "hole-between",
        framed('{"a":' + entry() + ',"b":' + entry(offsets="[8,12]") + "}", bytes(12)),
        "LayoutError",
        "hole",
        "b",
    ),
    Bad(
        "overlap",
        framed(
            '{"a":' + entry(shape="[2]", offsets="[0,8]") + ',"b":' + entry(offsets="[4,8]") + "}",
            bytes(8),
        ),
        "LayoutError",
        "overlap",
        "b",
    ),
    Bad(
        "same-offsets",
        framed('{"a":' + entry() + ',"b":' + entry() + "}", bytes(4)),
        "LayoutError",
        "overlap",
    ),
    Bad(
        "data-too-short",
        framed('{"t":' + entry(shape="[4]", offsets="[0,16]") + "}", bytes(12)),
        "LayoutError",
        "data-too-short",
        "t",
    ),
    Bad(
        "trailing-bytes", framed('{"t":' + entry() + "}", bytes(5)), "LayoutError", "trailing-bytes"
    ),
    Bad("trailing-zip", framed("{}", b"PK\x03\x04" + bytes(26)), "LayoutError", "trailing-bytes"),
]


class Good(NamedTuple):
    name: str
    content: bytes
    reference_accepts: bool = True


GOOD: List[Good] = [
    Good("empty-header", framed("{}")),
    Good("unpadded-header", framed("{}", pad_to=1)),
    Good("leading-whitespace", framed(' \n\t{"t":' + entry() + "}", bytes(4))),
    Good("trailing-newlines", framed('{"t":' + entry() + "}\n\r\t ", bytes(4))),
    Good("scalar", raw_file({"s": ("F64", [], bytes(8))})),
    Good(
        "empty-tensors-sharing",
        raw_file({"a": ("F32", [0], b""), "b": ("I8", [3, 0], b""), "c": F32_4}),
    ),
    Good("unaligned", raw_file({"u": ("U8", [3], b"abc"), "f": ("F64", [1], bytes(8))})),
    Good("non-ascii-names", raw_file({"ünïcødé.权重": F32_4, "emoji🙂": ("U8", [1], b"x")})),
    Good("empty-metadata", raw_file({"t": F32_4}, metadata={})),
    Good("absent-metadata", raw_file({"t": F32_4})),
    Good("null-metadata", framed('{"__metadata__":null,"t":' + entry() + "}", bytes(4))),
    Good("metadata-escapes", raw_file({}, metadata={"k\n\u00e9": 'v"\\\u2028', "": ""})),
    Good(
        "any-order",
        framed('{"b":' + entry(offsets="[4,8]") + ',"a":' + entry() + "}", bytes(8)),
    ),
    Good("unknown-field", one(entry(extra=',"note":{"x":[1,2,{"y":null}]}'))),
    Good(
        "metadata-after-tensors", framed('{"t":' + entry() + ',"__metadata__":{"a":"b"}}', bytes(4))
    ),
    Good("packed-f4", raw_file({"p": ("F4", [2, 3], bytes(3))}), reference_accepts=False),
    Good("all-zero-size", raw_file({"a": ("F32", [0, 5], b""), "b": ("BF16", [0], b"")})),
]
