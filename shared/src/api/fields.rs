//! Reading a JSON object field by field, so one response names every
//! problem of a body: each missing field, each unknown one, each value of
//! the wrong type, beside each value that does not parse. A derived
//! deserializer stops at the first.

use serde_json::{Map, Value};

use super::problem::{InvalidParam, Problem};
use crate::booking::domain::ParseError;

/// Collects field errors so one response names all of them.
#[derive(Default)]
pub struct FieldErrors(Vec<InvalidParam>);

impl FieldErrors {
    /// The value, or `None` with its problem reported under `field` (the
    /// JSON path, which the parser cannot know).
    pub fn check<T>(&mut self, field: impl Into<String>, r: Result<T, ParseError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.refuse(field, e.problem);
                None
            }
        }
    }

    /// How many problems so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Reports `field` as invalid for `reason`.
    pub fn refuse(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(InvalidParam { name: field.into(), reason: reason.into() });
    }

    pub fn into_result(self) -> Result<(), Problem> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Problem::invalid(self.0))
        }
    }
}

/// A field of a `PATCH` body: left out (keep it), `null` (clear it), or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patch<T> {
    Absent,
    Null,
    Value(T),
}

/// The fields of one JSON object at `path` (empty for the body itself).
pub struct Object<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Object<'a> {
    /// The object at `path`, or `None` with "must be an object" reported.
    pub fn of(value: &'a Value, path: &str, errors: &mut FieldErrors) -> Option<Self> {
        match value.as_object() {
            Some(map) => Some(Self { map, path: path.to_string() }),
            None => {
                errors.refuse(if path.is_empty() { "body" } else { path }, "must be a JSON object");
                None
            }
        }
    }

    /// The JSON path of field `name`.
    pub fn path(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// Whether the object has field `name` (`null` included).
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Reports every field not in `known`.
    pub fn deny_unknown(&self, known: &[&str], errors: &mut FieldErrors) {
        for key in self.map.keys().filter(|k| !known.contains(&k.as_str())) {
            errors.refuse(self.path(key), format!("unknown field; the fields are {}", known.join(", ")));
        }
    }

    fn patch_of<T>(
        &self,
        name: &str,
        kind: &str,
        errors: &mut FieldErrors,
        cast: fn(&'a Value) -> Option<T>,
    ) -> Patch<T> {
        match self.map.get(name) {
            None => Patch::Absent,
            Some(Value::Null) => Patch::Null,
            Some(v) => match cast(v) {
                Some(t) => Patch::Value(t),
                None => {
                    errors.refuse(self.path(name), format!("must be {kind}"));
                    Patch::Absent
                }
            },
        }
    }

    /// A string that must be there.
    pub fn string(&self, name: &str, errors: &mut FieldErrors) -> Option<&'a str> {
        self.required(name, self.patch_of(name, "a string", errors, Value::as_str), errors)
    }

    /// A string that may be left out or `null`.
    pub fn patch_string(&self, name: &str, errors: &mut FieldErrors) -> Patch<&'a str> {
        self.patch_of(name, "a string", errors, Value::as_str)
    }

    /// An array that must be there.
    pub fn array(&self, name: &str, errors: &mut FieldErrors) -> Option<&'a Vec<Value>> {
        self.required(name, self.patch_of(name, "an array", errors, Value::as_array), errors)
    }

    /// An array that may be left out or `null`.
    pub fn patch_array(&self, name: &str, errors: &mut FieldErrors) -> Patch<&'a Vec<Value>> {
        self.patch_of(name, "an array", errors, Value::as_array)
    }

    /// A 32-bit integer that must be there.
    pub fn integer(&self, name: &str, errors: &mut FieldErrors) -> Option<i32> {
        let int = |v: &'a Value| v.as_i64().and_then(|i| i32::try_from(i).ok());
        self.required(name, self.patch_of(name, "an integer", errors, int), errors)
    }

    fn required<T>(&self, name: &str, p: Patch<T>, errors: &mut FieldErrors) -> Option<T> {
        match p {
            Patch::Value(v) => Some(v),
            Patch::Null => {
                errors.refuse(self.path(name), "must not be null");
                None
            }
            // Absent after a type error is already reported.
            Patch::Absent if self.map.contains_key(name) => None,
            Patch::Absent => {
                errors.refuse(self.path(name), "missing field");
                None
            }
        }
    }
}
