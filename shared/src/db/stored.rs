//! The one pattern for a status stored as text: [`stored_enum!`] declares
//! the enum, its text, its SQL literals, and how it is read back.
//!
//! Each declared enum gets:
//! - `as_str()` (the stored text) and `ALL` (every value, in order);
//! - a module of SQL literal constants (`'PENDING'`), which statements splice
//!   in at compile time (`const_format`), so partial indexes on literal
//!   statuses still match and no other code spells a status;
//! - `Display`, `FromStr` and serde both ways, all through the stored text;
//! - `from_row`, which reads the column and turns a value this version does
//!   not know into [`DbError::Corrupt`](super::DbError::Corrupt): never a
//!   silent default, never a panic.

/// A stored text that names no value of its enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{column} holds {value:?}, which is not one of {expected}")]
pub struct UnknownValue {
    /// `table.column`.
    pub column: &'static str,
    pub value: String,
    /// The values this version knows, comma-separated.
    pub expected: &'static str,
}

/// Declares an enum stored as text in `table.column`:
///
/// ```
/// shared::stored_enum! {
///     /// A door.
///     pub enum Door in "doors.state", sql: door_sql {
///         /// Shut.
///         Closed = "CLOSED" => CLOSED,
///         Open = "OPEN" => OPEN,
///     }
/// }
/// assert_eq!(door_sql::OPEN, "'OPEN'");
/// assert_eq!("CLOSED".parse::<Door>().unwrap(), Door::Closed);
/// assert!("AJAR".parse::<Door>().unwrap_err().to_string().contains("doors.state"));
/// ```
#[macro_export]
macro_rules! stored_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident in $column:literal, sql: $sql:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal => $konst:ident ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The stored column, `table.column`.
            pub const COLUMN: &'static str = $column;

            /// The value as stored.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// Reads the column `idx` of `row`; a value this version does
            /// not know is [`DbError::Corrupt`]($crate::db::DbError::Corrupt).
            pub fn from_row(row: &$crate::db::__private::tokio_postgres::Row, idx: &str) -> Result<Self, $crate::db::DbError> {
                let raw: &str = row.try_get(idx)?;
                Ok(raw.parse()?)
            }
        }

        /// The SQL literals of each value (`'TEXT'`), for statements.
        #[allow(dead_code)]
        $vis mod $sql {
            $( pub const $konst: &str = concat!("'", $text, "'"); )+
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::db::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    _ => Err($crate::db::UnknownValue {
                        column: $column,
                        value: s.to_string(),
                        expected: concat!($($text, ", "),+),
                    }),
                }
            }
        }

        impl $crate::db::__private::serde::Serialize for $name {
            fn serialize<S: $crate::db::__private::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::db::__private::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::db::__private::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as $crate::db::__private::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err($crate::db::__private::serde::de::Error::custom)
            }
        }
    };
}
