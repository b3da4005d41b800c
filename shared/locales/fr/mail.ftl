subject-invitation = Invitation : { $title } @ { $when }
subject-updated = Invitation mise à jour : { $title } @ { $when }
subject-cancelled = Annulé : { $title } @ { $when }
subject-removed = Retiré : { $title } @ { $when }
subject-reminder = Rappel : { $title } @ { $when }
body-invited = { $who } vous invite à « { $title } ».
body-moved = { $who } a déplacé « { $title } ».
body-updated = { $who } a modifié « { $title } ».
body-cancelled = { $who } a annulé « { $title } ».
body-removed = { $who } vous a retiré de « { $title } ».
body-reminder = Rappel : « { $title } », organisé par { $who }, commence dans { $left }.
label-when = Quand :
label-was = Avant :
label-where = Où :
left-days = { $n ->
    [one] 1 jour
   *[other] { $n } jours
}
left-hours = { $n ->
    [one] 1 heure
   *[other] { $n } heures
}
left-minutes = { $n ->
    [one] 1 minute
   *[other] { $n } minutes
}
left-under-a-minute = moins d’une minute
when-one-day = { $date }, { $from } – { $to } ({ $zone })
when-days = { $from } – { $to } ({ $zone })
label-duration = Durée :
label-organizer = Organisateur :
label-organizer-time = Heure de l’organisateur :
label-guests = Invités :
label-title = Titre :
label-now = Désormais :
more-guests = { $n ->
    [one] et 1 autre
   *[other] et { $n } autres
}
heading-changes = Ce qui change
label-planned = Était prévu :
note-cancelled = Cette réunion n’aura pas lieu. Votre agenda la retire à l’ouverture de ce message.
note-removed = Vous n’êtes plus invité. Votre agenda retire la réunion à l’ouverture de ce message.
note-answer = Votre agenda affiche les boutons pour accepter ou refuser cette invitation.
note-reminder = Aucune réponse n’est attendue : ceci est un rappel.
length-days = { $n ->
    [one] 1 jour
   *[other] { $n } jours
}
length-hours = { $n ->
    [one] 1 heure
   *[other] { $n } heures
}
length-minutes = { $n ->
    [one] 1 minute
   *[other] { $n } minutes
}
