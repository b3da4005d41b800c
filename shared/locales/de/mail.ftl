subject-invitation = Einladung: { $title } @ { $when }
subject-updated = Aktualisierte Einladung: { $title } @ { $when }
subject-cancelled = Abgesagt: { $title } @ { $when }
subject-removed = Ausgeladen: { $title } @ { $when }
subject-reminder = Erinnerung: { $title } @ { $when }
body-invited = { $who } hat Sie zu „{ $title }“ eingeladen.
body-moved = { $who } hat „{ $title }“ verschoben.
body-updated = { $who } hat „{ $title }“ geändert.
body-cancelled = { $who } hat „{ $title }“ abgesagt.
body-removed = { $who } hat Sie von „{ $title }“ ausgeladen.
body-reminder = Erinnerung: „{ $title }“, organisiert von { $who }, beginnt in { $left }.
label-when = Wann:
label-was = Vorher:
label-where = Wo:
left-days = { $n ->
    [one] 1 Tag
   *[other] { $n } Tagen
}
left-hours = { $n ->
    [one] 1 Stunde
   *[other] { $n } Stunden
}
left-minutes = { $n ->
    [one] 1 Minute
   *[other] { $n } Minuten
}
left-under-a-minute = weniger als einer Minute
when-one-day = { $date }, { $from }–{ $to } ({ $zone })
when-days = { $from } – { $to } ({ $zone })
label-duration = Dauer:
label-organizer = Organisator:
label-organizer-time = Zeit des Organisators:
label-guests = Gäste:
label-title = Titel:
label-now = Jetzt:
more-guests = { $n ->
    [one] und 1 weitere Person
   *[other] und { $n } weitere
}
heading-changes = Was sich ändert
label-planned = War geplant für:
note-cancelled = Dieser Termin findet nicht statt. Ihre Kalender-App entfernt ihn, wenn Sie diese Nachricht öffnen.
note-removed = Sie sind nicht mehr eingeladen. Ihre Kalender-App entfernt den Termin, wenn Sie diese Nachricht öffnen.
note-answer = Ihre Kalender-App zeigt Schaltflächen zum Zusagen oder Absagen dieser Einladung.
note-reminder = Keine Antwort nötig: Dies ist eine Erinnerung.
length-days = { $n ->
    [one] 1 Tag
   *[other] { $n } Tage
}
length-hours = { $n ->
    [one] 1 Stunde
   *[other] { $n } Stunden
}
length-minutes = { $n ->
    [one] 1 Minute
   *[other] { $n } Minuten
}
