"""The JSON-RPC protocol as pygls speaks it, except that every request is answered.

pygls reads a message's parameters into their lsprotocol types while it decodes the message, and
when they do not fit (`"params": 5`, a negative position) it logs the failure and drops the
message: the client waits for ever for an answer. Here such a request is answered with
InvalidParams naming what did not fit; a notification, which has no answer, is still dropped.
"""

from __future__ import annotations

from typing import Any

from cattrs import transform_error
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol

ANSWERED = object()  # what a request answered while it was decoded becomes: nothing more to do


class DojoProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not ("id" in data and "method" in data):  # a notification or a response: nobody waits
                raise
            cause = error.__cause__
            where = "; ".join(transform_error(cause)) if cause is not None else error.message
            msg_id = data["id"] if isinstance(data["id"], int | str) else None
            self._send_response(msg_id, error=JsonRpcInvalidParams(
                f"{data['method']}: the parameters do not fit the protocol: {where}").to_response_error())
            return ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is not ANSWERED:
            super().handle_message(message)
