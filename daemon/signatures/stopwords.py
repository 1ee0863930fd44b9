"""Small stop-word lists shipped as Python data (no download), keyed by language name.

The lists are deliberately short (function words only): in ads, words like "new" or "black" carry
meaning and stay. Entries are written naturally; :mod:`daemon.signatures.text` folds them the same way
tokens are folded (case, accents) before use.
"""

from __future__ import annotations

ENGLISH: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t
    """.split()
)

FRENCH: frozenset[str] = frozenset(
    """
    a à au aux avec ce ces cet cette dans de des du elle elles en est et été être eu il ils je la le les
    leur leurs lui ma mais me même mes moi mon ne nos notre nous on ont ou où par pas pour qu que qui sa
    se ses son sont sur ta te tes toi ton tu un une vos votre vous y l d j m n s t c qu jusqu lorsqu
    puisqu quoi dont ni si très plus sans sous chez entre vers comme aussi car donc or
    """.split()
)

GERMAN: frozenset[str] = frozenset(
    """
    aber alle allem allen aller alles als also am an andere anderem anderen anderer anderes auch auf aus
    bei bin bis bist da damit dann das dass dein deine dem den der des dich die dir doch dort du durch ein
    eine einem einen einer eines er es etwas euch euer für hab habe haben hat hatte ich ihm ihn ihr ihre
    im in ins ist ja jede jedem jeden jeder jedes kein keine mich mir mit muss nach nicht noch nun nur ob
    oder ohne sehr sein seine sich sie sind so soll sollte um und uns unser unter vom von vor war waren
    was weil wenn wer wie wir wird wo zu zum zur über
    """.split()
)

SPANISH: frozenset[str] = frozenset(
    """
    a al algo algunas algunos ante antes como con contra cual cuando de del desde donde durante e el ella
    ellas ellos en entre era es esa esas ese eso esos esta estaba estas este esto estos fue fueron ha hay
    la las le les lo los más me mi mis mucho muy ni no nos nosotros o os otra otro para pero poco por
    porque que quien se ser si sin sobre su sus también te tiene todo tu tus un una unas uno unos y ya yo
    él
    """.split()
)

ITALIAN: frozenset[str] = frozenset(
    """
    a ad agli ai al alla alle anche che chi ci col come con contro da dal dalla dalle dei del della delle
    dello di dove e ed era gli ha hanno i il in io la le lei li lo loro ma mi mio nei nel nella nelle no
    noi non o per più quale quando quella quello questa questo se si sia sono su sua sue suo sul sulla
    tra tu tutti tutto un una uno vi è
    """.split()
)

STOPWORDS: dict[str, frozenset[str]] = {"english": ENGLISH, "french": FRENCH, "german": GERMAN, "spanish": SPANISH,
                                        "italian": ITALIAN}
"""Language name (as accepted by ``TextOptions.language``) → raw stop-word set."""
