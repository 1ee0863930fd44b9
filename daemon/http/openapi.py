"""The hand-written OpenAPI 3.1 description served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from daemon.http.options import ApiOptions

_NUMERIC = {"price", "lat", "lon"}


def _ad_schema(roles: tuple[str, ...], options: ApiOptions) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for r in roles:
        if r in _NUMERIC:
            props[r] = {"oneOf": [{"type": "number"}, {"type": "string"}, {"type": "null"}],
                        "description": "number, or text such as \"1,299.00\""}
        else:
            props[r] = {"type": ["string", "integer", "null"]}
    props["id"] = {"type": ["string", "integer"], "description": "a record to leave out of the candidates "
                                                                 "(checking an edit of a stored ad)"}
    return {"type": "object", "properties": props,
            "additionalProperties": options.unknown_fields != "reject",
            "description": "A candidate ad keyed by field role. Needs a title or a body, and the scope "
                           "field (dedup.scope, e.g. user) unless the scope is global."}


def openapi_schema(roles: tuple[str, ...], options: ApiOptions) -> dict[str, Any]:
    """The OpenAPI document for the configured field ``roles`` and ``options`` (JSON-serialisable dict)."""
    error = {"type": "object", "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
             "required": ["error"]}
    err_responses = {
        "401": {"description": "missing or wrong X-API-Key (when keys are configured)",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
        "413": {"description": f"body larger than {options.max_body_bytes} bytes"},
        "422": {"description": "invalid body; `field` names the offending key",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
        "503": {"description": "the index is unreachable; retry"},
    }
    match = {"type": "object", "properties": {
        "id": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 100},
        "flag": {"enum": ["duplicate", "potential_duplicate"]},
        "reasons": {"type": "object", "additionalProperties": {"type": "object"}},
        "summary": {"type": "string"}}}
    check_result = {"type": "object", "required": ["decision", "score", "matches", "signature_version"],
                    "properties": {
                        "decision": {"enum": ["duplicate", "potential_duplicate", "unique"]},
                        "score": {"type": "number", "description": "best match's score, 0-100"},
                        "matches": {"type": "array", "items": match, "maxItems": options.max_matches},
                        "signature_version": {"type": "integer"}, "candidates": {"type": "integer"},
                        "capped": {"type": "boolean"}, "took_ms": {"type": "number"}}}
    ref = {"oneOf": [{"type": ["string", "integer"]},
                     {"type": "object", "properties": {"id": {"type": ["string", "integer"]},
                                                       "version": {"type": "integer"}}, "required": ["id"]}]}
    set_req = {"type": "object", "properties": {
        "ids": {"type": "array", "items": ref, "maxItems": options.max_set},
        "documents": {"type": "array", "items": {"$ref": "#/components/schemas/Ad"}, "maxItems": options.max_set},
        "threshold": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": options.default_threshold}},
        "description": "exactly one of ids or documents, in ranking order"}
    set_result = {"type": "object", "properties": {
        "groups": {"type": "array", "items": {"type": "array"},
                   "description": "near-duplicate groups (2+ members); the first member is the one to keep"},
        "keep": {"type": "array", "description": "one per group and singleton, ranking order"},
        "missing": {"type": "array", "items": {"type": "string"}}, "threshold": {"type": "number"},
        "cached": {"type": "integer"}, "took_ms": {"type": "number"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "nearsync", "version": "1",
                 "description": "Near-duplicate checks against the nearsync index, result-set dedup and the "
                                "moderators' duplicates queue."},
        "components": {
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
            "schemas": {"Ad": _ad_schema(roles, options), "CheckResult": check_result, "Error": error,
                        "DedupSetRequest": set_req, "DedupSetResult": set_result}},
        "security": [{"apiKey": []}] if options.api_keys else [],
        "paths": {
            "/v1/check": {"post": {
                "summary": "Would this ad be flagged? Scores it against its candidates like the dedup worker.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Ad"}}}},
                "responses": {"200": {"description": "decision and best matches", "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/CheckResult"}}}}, **err_responses}}},
            "/v1/dedup-set": {"post": {
                "summary": "Group near-duplicates within a ranked set of record ids or documents.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/DedupSetRequest"}}}},
                "responses": {"200": {"description": "groups", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/DedupSetResult"}}}}, **err_responses}}},
            "/moderation": {"get": {
                "summary": "The duplicates queue (HTML): potential duplicates newest first.",
                "parameters": [{"name": n, "in": "query", "required": False, "schema": {"type": t}}
                               for n, t in (("category", "string"), ("min_score", "number"),
                                            ("moderator", "string"), ("limit", "integer"))],
                "responses": {"200": {"description": "HTML page", "content": {"text/html": {}}}}}},
            "/moderation/decide": {"post": {
                "summary": "Confirm (flag becomes duplicate) or dismiss (not_duplicate) a potential duplicate.",
                "requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": {
                    "type": "object", "required": ["record_id", "original_id", "action"],
                    "properties": {"record_id": {"type": "string"}, "original_id": {"type": "string"},
                                   "action": {"enum": ["confirm", "dismiss"]}, "moderator": {"type": "string"}}}}}},
                "responses": {"303": {"description": "back to the queue (browsers)"},
                              "200": {"description": "JSON outcome with Accept: application/json"},
                              "404": {"description": "no such flag"}, "409": {"description": "flag changed"},
                              **err_responses}}},
            "/healthz": {"get": {"summary": "liveness", "security": [],
                                 "responses": {"200": {"description": "ok"}}}},
        },
    }
