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

crate::stored_enum! {
    /// Why a send was settled without a call, where its status alone does
    /// not tell (`not_sent_because`, V46; NULL otherwise). Programs read
    /// this; `last_error` says it in words for people.
    pub enum NotSentBecause in "booking_notification_sends.not_sent_because", sql: not_sent_sql {
        /// FAILED before any call: the address is suppressed (it bounced,
        /// or its person complained).
        Suppressed = "SUPPRESSED" => SUPPRESSED,
        /// SUPERSEDED: a reminder picked up once its meeting had started.
        TooLate = "TOO_LATE" => TOO_LATE,
    }
}

crate::stored_enum! {
    /// Which way a send went out (`provider`, V23/V25): what its mailer
    /// says of itself ([`Mailer::provider`](crate::notify::mailer::Mailer::provider)).
    pub enum SentVia in "booking_notification_sends.provider", sql: via_sql {
        /// SES v2's API, with its event stream.
        Ses = "ses" => SES,
        /// SES's own SMTP interface with a configuration set: its events
        /// settle ambiguous sends too.
        SesSmtp = "ses-smtp" => SES_SMTP,
        /// Any other SMTP server: nothing reports back.
        Smtp = "smtp" => SMTP,
    }
}

impl SentVia {
    /// SES publishes events about its sends, which may settle an ambiguous
    /// one (and, when they move past it, resend it on their evidence).
    pub fn publishes_events(self) -> bool {
        matches!(self, SentVia::Ses | SentVia::SesSmtp)
    }
}
