import json
import openai
from gateway.referee import Referee
from tests.conftest import model_entry
from tests.factories import system, user, assistant, tool, tool_call

def big(n, tag):
    return " ".join(f"{tag}{i} line of file content" for i in range(n))

async def test_smoke(gateway_factory):
    async with Referee(rules="openai", style="openai", context_window=1500) as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url, model="openai/referee")],
                                    })
        c = openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)
        history = [system("You are a coding agent.")]
        for turn in range(6):
            history.append(user(f"step {turn}: please read file {turn}"))
            history.append(assistant(None, [tool_call(f"call_{turn}", "read", {"path": f"f{turn}.py"})]))
            history.append(tool(f"call_{turn}", big(60, f"t{turn}-")))
            raw = await c.chat.completions.with_raw_response.create(model="demo", messages=history, extra_headers={"x-session-id": "s1"})
            comp = raw.parse()
            print(turn, dict((k, v) for k, v in raw.headers.items() if k.startswith("x-gateway")), comp.choices[0].message.content)
            history.append(assistant(comp.choices[0].message.content))
        for r in ref.requests:
            b = r.json()
            print(r.status, r.situation, len(r.body), len(b["messages"]), b["messages"][0]["content"][:40])
        await c.close()
