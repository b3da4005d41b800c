//! JSON bodies, with repeated keys refused. serde_json keeps the last of two
//! equal keys in an object; a proxy or WAF that reads the first would then
//! judge a different request than the one the service runs.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

#[derive(Debug)]
pub enum JsonError {
    /// Not JSON at all.
    Syntax(serde_json::Error),
    /// A key appears twice in one object; the path names it
    /// (`title`, `attendees[1].email`).
    DuplicateKey(String),
}

/// Parses a JSON document like `serde_json::from_slice::<Value>`, but an
/// object with a repeated key is an error naming the key's path.
pub fn parse_unique_keys(bytes: &[u8]) -> Result<Value, JsonError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Unique { path: "", duplicate: &duplicate }.deserialize(&mut de).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    match (parsed, duplicate.into_inner()) {
        (_, Some(path)) => Err(JsonError::DuplicateKey(path)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(JsonError::Syntax(e)),
    }
}

/// One value at `path`; a duplicate key is recorded in `duplicate`.
#[derive(Clone, Copy)]
struct Unique<'a> {
    path: &'a str,
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(Unique { path: &path, duplicate: self.duplicate })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            if !seen.insert(key.clone()) {
                *self.duplicate.borrow_mut() = Some(path);
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Unique { path: &path, duplicate: self.duplicate })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(json: &str) -> Option<String> {
        match parse_unique_keys(json.as_bytes()) {
            Err(JsonError::DuplicateKey(path)) => Some(path),
            _ => None,
        }
    }

    #[test]
    fn repeated_keys_are_refused_with_their_path() {
        assert_eq!(dup(r#"{"title":"A","start":"x","title":"B"}"#).as_deref(), Some("title"));
        assert_eq!(
            dup(r#"{"attendees":[{"email":"a"},{"email":"b","email":"c"}]}"#).as_deref(),
            Some("attendees[1].email")
        );
        assert_eq!(dup(r#"{"a":{"b":{"c":1,"c":2}}}"#).as_deref(), Some("a.b.c"));
        // Escapes decode to the same key.
        assert_eq!(dup(r#"{"title":"A","\u0074itle":"B"}"#).as_deref(), Some("title"));
    }

    #[test]
    fn anything_else_parses_as_serde_json_does() {
        for json in [r#"{"a":1,"b":[1,2.5,-3,{"a":null}],"c":"é","d":true}"#, "[]", "12", r#""s""#, "null"] {
            let ours = parse_unique_keys(json.as_bytes()).unwrap();
            assert_eq!(ours, serde_json::from_str::<Value>(json).unwrap(), "{json}");
        }
        for bad in ["{", r#"{"a":1}x"#, "", r#"{"a":1,}"#] {
            assert!(matches!(parse_unique_keys(bad.as_bytes()), Err(JsonError::Syntax(_))), "{bad:?}");
        }
    }
}
