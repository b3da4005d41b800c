//! The one database error of the library. Every public function that runs
//! SQL returns [`DbResult`], so a caller tells "the database is unreachable"
//! (retry later, 503) from "a statement failed" (with its SQLSTATE kept)
//! without knowing which driver produced it.

use tokio_postgres::error::SqlState;

pub type DbResult<T> = Result<T, DbError>;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had from the pool (server down, timeout, a
    /// refused login). The message carries the server's SQLSTATE and text
    /// (`28P01 password authentication failed …`), not only "db error".
    #[error("database unavailable: {}", pool_cause(.0))]
    Unavailable(#[from] deadpool_postgres::PoolError),
    /// A statement failed; `code` is its SQLSTATE when the server sent one.
    /// The message carries the server's SQLSTATE and text (or the I/O
    /// cause), not only the driver's "db error".
    #[error("database error: {}", cause(source))]
    Statement {
        code: Option<SqlState>,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A stored value this version cannot read (a status outside its enum,
    /// a field its parser refuses): reported, never defaulted.
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
}

impl From<super::stored::UnknownValue> for DbError {
    fn from(e: super::stored::UnknownValue) -> Self {
        DbError::Corrupt(e.to_string())
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(source: tokio_postgres::Error) -> Self {
        DbError::Statement { code: source.code().cloned(), source }
    }
}

/// What a driver error says, with the server's SQLSTATE and message or the
/// underlying I/O error.
fn cause(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}", db.code().code(), db.message());
    }
    match std::error::Error::source(e) {
        Some(inner) => format!("{e}: {inner}"),
        None => e.to_string(),
    }
}

fn pool_cause(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => cause(e),
        e => e.to_string(),
    }
}

impl DbError {
    /// The SQLSTATE of a failed statement.
    pub fn code(&self) -> Option<&SqlState> {
        match self {
            DbError::Statement { code, .. } => code.as_ref(),
            DbError::Unavailable(_) | DbError::Corrupt(_) => None,
        }
    }

    /// The constraint a failed statement violated.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            DbError::Statement { source, .. } => source.as_db_error().and_then(|e| e.constraint()),
            DbError::Unavailable(_) | DbError::Corrupt(_) => None,
        }
    }

    /// Worth retrying as it is: the database was unreachable, the connection
    /// dropped, or the transaction lost a race (serialization, deadlock).
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::Unavailable(_) => true,
            DbError::Statement { code, source } => {
                source.is_closed()
                    || code.as_ref().is_some_and(|c| {
                        *c == SqlState::T_R_SERIALIZATION_FAILURE
                            || *c == SqlState::T_R_DEADLOCK_DETECTED
                            || *c == SqlState::ADMIN_SHUTDOWN
                            || *c == SqlState::CANNOT_CONNECT_NOW
                    })
            }
            DbError::Corrupt(_) => false,
        }
    }
}

/// Lets an error type that wraps [`DbError`] (through `From<DbError>`) take
/// the driver's errors with `?` too: a statement's `tokio_postgres::Error`
/// and the pool's `PoolError` each become a [`DbError`] first, so every
/// such type classifies them the same way.
#[macro_export]
macro_rules! from_driver_errors {
    ($($t:ty),+ $(,)?) => {
        $(
            impl From<$crate::db::__private::tokio_postgres::Error> for $t {
                fn from(e: $crate::db::__private::tokio_postgres::Error) -> Self {
                    $crate::db::DbError::from(e).into()
                }
            }
            impl From<$crate::db::__private::deadpool_postgres::PoolError> for $t {
                fn from(e: $crate::db::__private::deadpool_postgres::PoolError) -> Self {
                    $crate::db::DbError::from(e).into()
                }
            }
        )+
    };
}
