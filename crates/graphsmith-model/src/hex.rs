//! Serde helper: bytes as a lowercase hex string (compact, readable in JSON).

use serde::{Deserialize, Deserializer, Serializer};

/// Serializes `bytes` as a lowercase hex string.
pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    s.serialize_str(&out)
}

/// Deserializes a hex string (either case) into bytes.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    decode(&text).map_err(serde::de::Error::custom)
}

/// Decodes a hex string; an odd length or a non-hex digit is an error naming the position.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    if !text.is_ascii() {
        return Err("hex string has non-ASCII characters".to_string());
    }
    if text.len() % 2 == 1 {
        return Err(format!("hex string has odd length {}", text.len()));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&text[i..i + 2], 16)
                .map_err(|_| format!("invalid hex digits {:?} at {i}", &text[i..i + 2]))
        })
        .collect()
}
