subject-invitation = Invitación: { $title } @ { $when }
subject-updated = Invitación actualizada: { $title } @ { $when }
subject-cancelled = Cancelado: { $title } @ { $when }
subject-removed = Eliminado: { $title } @ { $when }
subject-reminder = Recordatorio: { $title } @ { $when }
body-invited = { $who } te ha invitado a «{ $title }».
body-moved = { $who } ha cambiado la hora de «{ $title }».
body-updated = { $who } ha actualizado «{ $title }».
body-cancelled = { $who } ha cancelado «{ $title }».
body-removed = { $who } te ha quitado de «{ $title }».
body-reminder = Recordatorio: «{ $title }», organizado por { $who }, empieza dentro de { $left }.
label-when = Cuándo:
label-was = Antes:
label-where = Dónde:
left-days = { $n ->
    [one] 1 día
   *[other] { $n } días
}
left-hours = { $n ->
    [one] 1 hora
   *[other] { $n } horas
}
left-minutes = { $n ->
    [one] 1 minuto
   *[other] { $n } minutos
}
left-under-a-minute = menos de un minuto
