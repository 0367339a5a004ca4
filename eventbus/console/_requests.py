"""Reading what a request brings: its urlencoded form (bounded), where it may go back to,
and who sent it."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from ._pages import ActionError

__all__ = ["MAX_FORM_BYTES", "MAX_FORM_FIELDS", "client_address", "read_form", "safe_next"]

MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 100


async def read_form(request: Request) -> FormData:
    """The urlencoded form of a ``POST``: at most 64 KiB, read no further than that.

    :raises ActionError: 415 for another content type, 413 for a larger body, 400 for a
        body that is not UTF-8 or has too many fields
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ActionError(
            "Send the console's forms as application/x-www-form-urlencoded.", status=415
        )
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise ActionError(f"The form is over {MAX_FORM_BYTES // 1024} KiB.", status=413)
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
        pairs: list[tuple[str, str | UploadFile]] = list(
            parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        )
    except UnicodeDecodeError:
        raise ActionError("The form is not UTF-8 text.") from None
    except ValueError:
        raise ActionError(f"The form has more than {MAX_FORM_FIELDS} fields.") from None
    return FormData(pairs)


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def safe_next(request: Request, value: object) -> str | None:
    """*value* if it is a path inside this console (no scheme, no host), else ``None``.

    Keeps the login and the actions from redirecting anywhere else (an open redirect); a
    ``done=`` parameter (the result of an earlier action) is dropped. A path with a dot
    segment (``.`` or ``..``, percent-encoded or not) is refused: the browser resolves it,
    and ``/ops/../x`` is ``/x``, outside the console.
    """
    if not isinstance(value, str) or not value:
        return None
    if value.startswith(("http://", "https://")):
        origin = f"{request.url.scheme}://{request.url.netloc}"
        if not value.startswith(origin + "/"):
            return None
        value = value[len(origin) :]
    base = request.scope.get("root_path", "").rstrip("/")
    if (
        not value.startswith(base + "/")
        or value.startswith("//")
        or "\\" in value
        or any(ord(c) < 33 for c in value)
    ):
        return None
    path, _, query = value.partition("?")
    if any(unquote(segment) in (".", "..") for segment in path.partition("#")[0].split("/")):
        return None
    kept = "&".join(p for p in query.split("&") if p and not p.startswith("done="))
    return f"{path}?{kept}" if kept else path
