# The mail each recipient reads, in English. Every other language has the
# same keys (a test checks). Variables: $title and $who (never translated),
# $when (a date and time, already in the recipient's zone and language),
# $left (how long until the start).
subject-invitation = Invitation: { $title } @ { $when }
subject-updated = Updated invitation: { $title } @ { $when }
subject-cancelled = Cancelled: { $title } @ { $when }
subject-removed = Removed: { $title } @ { $when }
subject-reminder = Reminder: { $title } @ { $when }
body-invited = { $who } invited you to "{ $title }".
body-moved = { $who } moved "{ $title }".
body-updated = { $who } updated "{ $title }".
body-cancelled = { $who } cancelled "{ $title }".
body-removed = { $who } removed you from "{ $title }".
body-reminder = Reminder: "{ $title }", organized by { $who }, starts in { $left }.
label-when = When:
label-was = Was:
label-where = Where:
left-days = { $n ->
    [one] 1 day
   *[other] { $n } days
}
left-hours = { $n ->
    [one] 1 hour
   *[other] { $n } hours
}
left-minutes = { $n ->
    [one] 1 minute
   *[other] { $n } minutes
}
left-under-a-minute = less than a minute
# A meeting's time: $date a long date, $from and $to times (or dates
# with times, when it spans days), $zone the zone's short label.
when-one-day = { $date }, { $from } – { $to } ({ $zone })
when-days = { $from } – { $to } ({ $zone })
label-duration = Duration:
label-organizer = Organizer:
label-organizer-time = Organizer's time:
label-guests = Guests:
label-title = Title:
label-now = Now:
more-guests = { $n ->
    [one] and 1 more
   *[other] and { $n } more
}
# Above the facts that changed, old and new side by side.
heading-changes = What changed
# What a cancellation says of the time it would have been.
label-planned = Was planned for:
note-cancelled = This meeting will not take place. Your calendar app removes it when you open this message.
note-removed = You are no longer invited. Your calendar app removes it when you open this message.
# Under an invitation or an update: the answer is in the calendar part.
note-answer = Your calendar app shows buttons to accept or decline this invitation.
note-reminder = No answer is needed: this is a reminder.
length-days = { $n ->
    [one] 1 day
   *[other] { $n } days
}
length-hours = { $n ->
    [one] 1 hour
   *[other] { $n } hours
}
length-minutes = { $n ->
    [one] 1 minute
   *[other] { $n } minutes
}
