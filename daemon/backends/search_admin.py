"""Index versions behind the search alias: create, swap, prune, and the rebuild (dual-write) alias.

The daemon reads and writes the alias ``A`` (option ``index``, default ``nearsync_ads``). Concrete
indices are ``A_v1``, ``A_v2``, ... and all get their settings and strict mappings from the index
template ``A_template`` (pattern ``A_v*``). Every function takes the backend's client adapter
(``backend.client``, a :class:`~daemon.backends.search.SearchClient`) and the alias.

A rebuild (``reindex``), without losing writes made meanwhile::

    new = await begin_rebuild(backend.client, backend.alias)   # A_v{N+1}, alias A_next -> it
    # every daemon re-reads the aliases before each bulk write (SearchBackend.refresh_write_targets),
    # so from its next batch on it dual-writes to A and to `new` (or set_extra_write_targets([new]));
    # ... bulk-load every record into `new` with the same external versions (older copies
    #     arriving after a newer live write come back 409 and are harmless) ...
    await finish_rebuild(backend.client, backend.alias, new)   # atomic: A -> new, A_next removed
    await prune_versions(backend.client, backend.alias, keep=backend.options.keep_versions)

Errors: TransientIndexError (unreachable, 429/5xx), SearchHTTPError (other HTTP errors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from daemon.backends import search_bodies as B
from daemon.backends.base import PermanentIndexError
from daemon.backends.search_client import SearchClient, SearchHTTPError


@dataclass(frozen=True, slots=True)
class IndexVersion:
    """One concrete index behind the alias.

    Attributes:
        name: e.g. ``nearsync_ads_v3``.
        number: the version number (3).
        live: the alias points at it.
        aliases: every alias on it (sorted).
    """

    name: str
    number: int
    live: bool
    aliases: tuple[str, ...] = ()


def next_alias(alias: str) -> str:
    """Name of the rebuild alias whose indices receive dual writes: ``{alias}_next``."""
    return f"{alias}_next"


async def _get_or_empty(client: SearchClient, path: str) -> dict[str, Any]:
    """``GET path``'s body, or ``{}`` when the server answers 404 (no such alias or index)."""
    try:
        return await client.request("GET", path)
    except SearchHTTPError as e:
        if e.status == 404:
            return {}
        raise


async def alias_indices(client: SearchClient, name: str) -> list[str]:
    """Concrete indices the alias ``name`` points to (sorted); ``[]`` if no such alias."""
    return sorted(await _get_or_empty(client, f"/_alias/{name}"))


async def ensure_template(client: SearchClient, alias: str) -> None:
    """Create or update the composable index template ``{alias}_template`` (applies to new indices only)."""
    await client.request("PUT", f"/_index_template/{B.template_name(alias)}", B.index_template(alias))


async def _create_index(client: SearchClient, name: str) -> bool:
    """Create ``name`` (settings/mappings from the template); False if it already existed."""
    try:
        await client.request("PUT", f"/{name}", {})
    except SearchHTTPError as e:
        if e.error_type == "resource_already_exists_exception":
            return False
        raise
    return True


async def ensure_index(client: SearchClient, alias: str) -> str:
    """Ensure the template, and if ``alias`` does not exist create ``{alias}_v1`` and point it there.

    Returns:
        The concrete index the alias points to.

    Raises:
        PermanentIndexError: a concrete index is named like the alias, or the alias spans several indices.
    """
    await ensure_template(client, alias)
    live = await alias_indices(client, alias)
    if not live:
        first = B.version_index(alias, 1)
        await _create_index(client, first)
        try:
            await client.request("POST", "/_aliases", {"actions": [{"add": {"index": first, "alias": alias}}]})
        except SearchHTTPError as e:
            raise PermanentIndexError(f"cannot create alias {alias!r}: {e}") from e
        live = await alias_indices(client, alias)
    if len(live) != 1:
        raise PermanentIndexError(f"alias {alias!r} must point to exactly one index, points to {live}")
    return live[0]


async def list_versions(client: SearchClient, alias: str) -> list[IndexVersion]:
    """Every ``{alias}_v<N>`` index, oldest first, with whether the alias points to it (``[]`` if none)."""
    res = await _get_or_empty(client, f"/{alias}_v*/_alias")
    pat = re.compile(rf"^{re.escape(alias)}_v(\d+)$")
    out: list[IndexVersion] = []
    for name, info in res.items():
        m = pat.match(name)
        if m:
            aliases = tuple(sorted((info or {}).get("aliases") or {}))
            out.append(IndexVersion(name, int(m.group(1)), alias in aliases, aliases))
    return sorted(out, key=lambda v: v.number)


async def create_next_version(client: SearchClient, alias: str) -> str:
    """Create ``{alias}_v{N+1}`` (N = highest existing version, 0 if none) from the template.

    Returns:
        The new index name. The alias is not moved (see :func:`swap_alias`).
    """
    await ensure_template(client, alias)
    versions = await list_versions(client, alias)
    n = (versions[-1].number if versions else 0) + 1
    while not await _create_index(client, B.version_index(alias, n)):  # lost a race: take the next one
        n += 1
    return B.version_index(alias, n)


async def _move_actions(client: SearchClient, alias: str, new: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The indices ``alias`` points to besides ``new``, and the actions moving it to ``new`` only."""
    old = [i for i in await alias_indices(client, alias) if i != new]
    return old, [{"remove": {"index": i, "alias": alias}} for i in old] + [{"add": {"index": new, "alias": alias}}]


async def swap_alias(client: SearchClient, alias: str, new: str) -> list[str]:
    """Point ``alias`` at ``new`` only, atomically (one ``_aliases`` request: removes + add).

    Returns:
        The indices the alias pointed to before.
    """
    old, actions = await _move_actions(client, alias, new)
    await client.request("POST", "/_aliases", {"actions": actions})
    return old


async def prune_versions(client: SearchClient, alias: str, keep: int) -> list[str]:
    """Delete the oldest versions so that at most ``keep`` (>= 1) remain; never the live or rebuild ones.

    Returns:
        The deleted index names.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    versions = await list_versions(client, alias)
    protected = {alias, next_alias(alias)}
    doomed = [v for v in versions[:-keep] if not protected.intersection(v.aliases)] if len(versions) > keep else []
    for v in doomed:
        await client.request("DELETE", f"/{v.name}")
    return [v.name for v in doomed]


async def begin_rebuild(client: SearchClient, alias: str) -> str:
    """Create the next version and point the rebuild alias ``{alias}_next`` at it (and only it).

    Backends then dual-write to it (see ``SearchBackend.refresh_write_targets``). Returns its name.
    """
    new = await create_next_version(client, alias)
    nxt = next_alias(alias)
    actions = [{"remove": {"index": i, "alias": nxt}} for i in await alias_indices(client, nxt)]
    await client.request("POST", "/_aliases", {"actions": [*actions, {"add": {"index": new, "alias": nxt}}]})
    return new


async def finish_rebuild(client: SearchClient, alias: str, new: str) -> list[str]:
    """Atomically move ``alias`` to ``new`` and drop the rebuild alias. Returns the previous live indices."""
    nxt = next_alias(alias)
    old, actions = await _move_actions(client, alias, new)
    actions += [{"remove": {"index": i, "alias": nxt}} for i in await alias_indices(client, nxt)]
    await client.request("POST", "/_aliases", {"actions": actions})
    return old


async def abandon_rebuild(client: SearchClient, alias: str) -> list[str]:
    """Remove the rebuild alias and delete the indices it pointed to (never a live one).

    Used when a rebuild is started over: the half-built version would otherwise count as a kept
    version and push the previous live one out of :func:`prune_versions`. Returns the deleted names.
    """
    nxt = next_alias(alias)
    live = set(await alias_indices(client, alias))
    doomed = [i for i in await alias_indices(client, nxt) if i not in live]
    if doomed:
        await client.request("POST", "/_aliases", {"actions": [{"remove": {"index": i, "alias": nxt}} for i in doomed]})
        for i in doomed:
            await client.request("DELETE", f"/{i}")
    return doomed


async def rollback_target(client: SearchClient, alias: str) -> IndexVersion:
    """The kept version to roll back to: the newest one older than the live version, not being rebuilt.

    Raises:
        PermanentIndexError: no live version, or no older version kept (see ``keep_versions``).
    """
    versions = await list_versions(client, alias)
    live = [v for v in versions if v.live]
    if len(live) != 1:
        raise PermanentIndexError(f"alias {alias!r} must point to exactly one version to roll back, points to "
                                  f"{[v.name for v in live]}")
    older = [v for v in versions if v.number < live[0].number and next_alias(alias) not in v.aliases]
    if not older:
        raise PermanentIndexError(f"no older version of {alias!r} is kept to roll back to "
                                  f"(versions: {[v.name for v in versions]})")
    return older[-1]
