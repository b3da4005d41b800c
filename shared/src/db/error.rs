//! The one database error of the library. Every public function that runs
//! SQL returns [`DbResult`], so a caller tells "the database is unreachable"
//! (retry later, 503) from "a statement failed" (with its SQLSTATE kept)
//! without knowing which driver produced it.

use tokio_postgres::error::SqlState;

pub type DbResult<T> = Result<T, DbError>;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had from the pool (server down, timeout).
    #[error("database unavailable: {0}")]
    Unavailable(#[from] deadpool_postgres::PoolError),
    /// A statement failed; `code` is its SQLSTATE when the server sent one.
    #[error("database error: {source}")]
    Statement {
        code: Option<SqlState>,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl From<tokio_postgres::Error> for DbError {
    fn from(source: tokio_postgres::Error) -> Self {
        DbError::Statement { code: source.code().cloned(), source }
    }
}

impl DbError {
    /// The SQLSTATE of a failed statement.
    pub fn code(&self) -> Option<&SqlState> {
        match self {
            DbError::Statement { code, .. } => code.as_ref(),
            DbError::Unavailable(_) => None,
        }
    }

    /// The constraint a failed statement violated.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            DbError::Statement { source, .. } => source.as_db_error().and_then(|e| e.constraint()),
            DbError::Unavailable(_) => None,
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
        }
    }
}
