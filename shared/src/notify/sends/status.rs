//! The states of a send, and who confirmed an ambiguous one.

crate::stored_enum! {
    /// The state of one send.
    pub enum SendStatus in "booking_notification_sends.status", sql: send_sql {
        /// Committed; the mailer has not answered (or the worker died).
        Claimed = "CLAIMED" => CLAIMED,
        /// Accepted by the provider.
        Sent = "SENT" => SENT,
        /// Permanently refused for this recipient.
        Failed = "FAILED" => FAILED,
        /// The outcome could not be known; never re-sent automatically.
        Unknown = "UNKNOWN" => UNKNOWN,
        /// Not sent: a later event of the booking made it moot
        /// (`superseded_by`). Never sent afterwards either.
        Superseded = "SUPERSEDED" => SUPERSEDED,
        /// Not sent: its recipient's mailbox had been mailed its daily
        /// limit across every organizer (`LIMIT_MAILS_PER_RECIPIENT_PER_DAY`).
        /// Never sent afterwards either.
        Capped = "CAPPED" => CAPPED,
    }
}

crate::stored_enum! {
    /// What settled a send that was ambiguous (`confirmed_by`; NULL when
    /// the mailer's own answer did).
    pub enum ConfirmedBy in "booking_notification_sends.confirmed_by", sql: confirmed_sql {
        /// SES's own Send (or later) event proved it accepted the message.
        SesEvent = "ses-event" => SES_EVENT,
    }
}
