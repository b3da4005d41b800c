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
