"""`llm-rl serve`: a trained policy over HTTP, on FastAPI and uvicorn, for the clients teams already have.

- OpenAI's API: `POST /v1/completions`, `POST /v1/chat/completions` (the run's chat template and system
  prompt, as in training), `GET /v1/models`; `stream: true` answers as server-sent events.
- `POST /generate` (text or chat prompts, several per request; `{"completions": [{text, tokens,
  finish_reason}]}`) and `GET /health` (the model, the limits, the batch counts), as before.

Requests that arrive together are generated in one batch (`batching.py`). Every limit, when crossed, is
a 4xx that names it (`limits.py`), in OpenAI's error shape (`errors.py`). With an API key, every path but
`/health` wants it as a Bearer token (`gate.py`).
"""

from llm_rl.tools.serve.limits import ServeLimits
from llm_rl.tools.serve.server import ApiServer, make_server

__all__ = ["ApiServer", "ServeLimits", "make_server"]
