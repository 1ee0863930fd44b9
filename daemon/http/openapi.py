"""The OpenAPI 3.1 description served at ``/openapi.json``, generated from the pydantic models.

Request and response schemas come from :mod:`daemon.http.models` (``model_json_schema``), so the
document and the validation cannot disagree; this module only lays out the paths around them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from daemon.http.models import CheckResult, DedupSetResult, ErrorOut, HealthOut, RequestModels
from daemon.http.options import ApiOptions

REF = "#/components/schemas/{model}"


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": REF.format(model=name)}}}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """A query model's fields as OpenAPI query parameters (optional, schema from the model)."""
    schema = model.model_json_schema()
    return [{"name": name, "in": "query", "required": name in schema.get("required", ()), "schema": prop}
            for name, prop in schema["properties"].items()]


def openapi_schema(models: RequestModels, options: ApiOptions) -> dict[str, Any]:
    """The OpenAPI document of a service with these ``models`` and ``options`` (a JSON-serialisable dict)."""
    _, defs = models_json_schema(
        [(models.ad, "validation"), (models.dedup_set, "validation"), (models.decide, "validation"),
         (models.login, "validation"), (CheckResult, "serialization"), (DedupSetResult, "serialization"),
         (ErrorOut, "serialization"), (HealthOut, "serialization")], ref_template=REF)
    schemas = defs.get("$defs", {})
    error = {"content": _json("ErrorOut")}
    errors = {
        "401": {"description": "no credential: send X-API-Key, or sign in at /login", **error},
        "403": {"description": "cross-origin request, or a form without the session's CSRF token", **error},
        "413": {"description": f"body larger than {options.max_body_bytes} bytes", **error},
        "422": {"description": "invalid request; `field` names the offending value", **error},
        "503": {"description": "the database or the index is unreachable; retry", **error},
    }
    form = "application/x-www-form-urlencoded"
    secured: list[dict[str, list[str]]] = [{"apiKey": []}, {"session": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "nearsync", "version": "1",
                 "description": "Near-duplicate checks against the nearsync index, result-set dedup and the "
                                "moderators' duplicates queue. Programs send X-API-Key; people sign in at /login "
                                "(a session cookie; forms carry its CSRF token)."},
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "session": {"type": "apiKey", "in": "cookie", "name": "nearsync_session"}},
            "schemas": schemas},
        "security": secured if options.api_keys else [],
        "paths": {
            "/v1/check": {"post": {
                "summary": "Would this ad be flagged? Scores it against its candidates like the dedup worker.",
                "requestBody": {"required": True, "content": _json("Ad")},
                "responses": {"200": {"description": "decision and best matches", "content": _json("CheckResult")},
                              "415": {"description": "not application/json", **error}, **errors}}},
            "/v1/dedup-set": {"post": {
                "summary": "Group near-duplicates within a ranked set of record ids or documents.",
                "requestBody": {"required": True, "content": _json("DedupSetRequest")},
                "responses": {"200": {"description": "groups", "content": _json("DedupSetResult")},
                              "415": {"description": "not application/json", **error}, **errors}}},
            "/moderation": {"get": {
                "summary": "The duplicates queue (HTML): potential duplicates newest first.",
                "parameters": _query_parameters(models.queue),
                "responses": {"200": {"description": "HTML page", "content": {"text/html": {}}},
                              "303": {"description": "a browser without a session: to /login"}, **errors}}},
            "/moderation/decide": {"post": {
                "summary": "Confirm (flag becomes duplicate) or dismiss (not_duplicate) a potential duplicate. "
                           "The moderator recorded is the credential's name.",
                "requestBody": {"required": True, "content": {form: {"schema": {"$ref": REF.format(
                    model="DecideForm")}}}},
                "responses": {"303": {"description": "back to the queue (browsers)"},
                              "200": {"description": "JSON outcome with Accept: application/json"},
                              "404": {"description": "no such flag", **error},
                              "409": {"description": "the flag changed", **error}, **errors}}},
            "/login": {
                "get": {"summary": "The sign-in form (HTML).", "security": [],
                        "responses": {"200": {"description": "HTML page", "content": {"text/html": {}}}}},
                "post": {"summary": "Exchange a key for a session cookie.", "security": [],
                         "requestBody": {"required": True, "content": {form: {"schema": {"$ref": REF.format(
                             model="LoginForm")}}}},
                         "responses": {"303": {"description": "signed in: to /moderation"},
                                       "401": {"description": "wrong key (the form again)"},
                                       "403": errors["403"], "413": errors["413"], "422": errors["422"]}}},
            "/healthz": {"get": {"summary": "Liveness and readiness: the backend is open and PostgreSQL answers "
                                            "with the nearsync schema.", "security": [],
                                 "responses": {"200": {"description": "ok", "content": _json("HealthOut")},
                                               "503": {"description": "not ready", "content": _json("HealthOut")}}}},
        },
    }
