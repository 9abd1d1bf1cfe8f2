"""`trainhook serve` with the admission replaced by a replay of its own answers.

The first request with a given body is admitted for real; every later one gets that answer
again without the mutation. Everything around it is ours: reading the request, the log line,
the metrics, encoding and sending the answer. Served next to ours and the do-nothing app, it
splits the served gap into what our app carries around the admission and the admission itself.
Run as `python -m bench.replayapp <trainhook serve arguments>`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from webhook import cli
from webhook.server import admission, app
from webhook.server.admission import Answer, Context

Review = Callable[[bytes, str | None, Context], Answer]


def replaying(review: Review) -> Review:
    answers: dict[bytes, Answer] = {}

    def replay(body: bytes, content_type: str | None, context: Context) -> Answer:
        answer = answers.get(body)
        if answer is None:
            answer = answers[body] = review(body, content_type, context)
        return answer

    return replay


if __name__ == "__main__":
    # The app looks `review` up in its module on every request.
    app.review = replaying(admission.review)  # type: ignore[attr-defined,assignment]
    sys.exit(cli.main(["serve", *sys.argv[1:]]))
