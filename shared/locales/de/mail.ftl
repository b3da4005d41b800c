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
