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

STOPWORDS: dict[str, frozenset[str]] = {"english": ENGLISH, "french": FRENCH}
"""Language name (as accepted by ``TextOptions.language``) → raw stop-word set."""
