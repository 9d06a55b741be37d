"""The agent wires beside chat: the OpenAI Responses API and the Anthropic Messages API.

Each wire is an edge adapter around the one chat Flow: it parses its body into a neutral
chat view (``*_view``), lets the same projection repair it, and either writes the repaired
history back in its own terms for a native upstream (``codecs``, ``native``) or translates
to Chat Completions and the answer back (``to_chat``, ``*_answer``). ``errors`` holds each
wire's error shape, ``dryrun`` the dry run of every shape; the aiohttp routes are the server's
(``gateway/server/wire_routes.py``): this package never imports it.
"""
