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
when-one-day = { $date }, { $from } – { $to } ({ $zone })
when-days = { $from } – { $to } ({ $zone })
label-duration = Duración:
label-organizer = Organizador:
label-organizer-time = Hora del organizador:
label-guests = Invitados:
label-title = Título:
label-now = Ahora:
more-guests = { $n ->
    [one] y 1 más
   *[other] y { $n } más
}
heading-changes = Qué cambia
label-planned = Estaba previsto para:
note-cancelled = Esta reunión no se celebrará. Tu aplicación de calendario la quita al abrir este mensaje.
note-removed = Ya no estás invitado. Tu aplicación de calendario quita la reunión al abrir este mensaje.
note-answer = Tu aplicación de calendario muestra botones para aceptar o rechazar esta invitación.
note-reminder = No hace falta responder: esto es un recordatorio.
length-days = { $n ->
    [one] 1 día
   *[other] { $n } días
}
length-hours = { $n ->
    [one] 1 hora
   *[other] { $n } horas
}
length-minutes = { $n ->
    [one] 1 minuto
   *[other] { $n } minutos
}
