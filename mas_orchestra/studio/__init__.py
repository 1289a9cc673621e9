"""``mas-orchestra studio``: a local web app to watch, steer and inspect orchestrated systems.

* :mod:`~mas_orchestra.studio.app` — the ASGI app (Starlette): JSON routes, server-sent events, the page;
  also importable as ``mas_orchestra.studio.app:app`` (the LangGraph server's custom HTTP app).
* :mod:`~mas_orchestra.studio.live` — live runs: an :class:`~mas_orchestra.runtime.Orchestra` on a
  checkpointed thread per run, its events broadcast to every browser tab watching it.
* :mod:`~mas_orchestra.studio.calls` — the per-node model calls (prompt, reply, tokens, time) of a live run.
* :mod:`~mas_orchestra.studio.browse` — eval and training output folders read from disk through a byte-offset
  index: filtered, paged tables and one record at a time, never a whole file in memory.
* :mod:`~mas_orchestra.studio.graph` — a spec as the nodes and labelled edges the page lays out.
* :mod:`~mas_orchestra.studio.samples` — the sample questions offered (MASBench generated on the fly, ``--data``).
* :mod:`~mas_orchestra.studio.security` — who gets in: the per-start token, local Host names, same-origin JSON
  writes, body size, limits, the page's security headers and the models the page may name.
* :mod:`~mas_orchestra.studio.cli` — the ``mas-orchestra studio`` command (prints the URL with the token).
* ``static/`` — the page (our HTML/CSS/JS) and ``static/vendor/`` (the dagre layout bundle built from
  ``frontend/`` with esbuild, and its license notice). Nothing is fetched from the network at run time.

The studio is a layer above the runtime: it imports :mod:`mas_orchestra`, nothing in the core imports it,
and it reads training output (``rollouts.jsonl``, ``trainer_state.json``) as data, never importing ``training``.
Needs the ``studio`` extra (``pip install 'mas-orchestra[studio]'``).
"""
