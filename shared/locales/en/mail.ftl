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
