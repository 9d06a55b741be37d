"""What upstream error wordings mean: small regexes and code names, grouped by verdict.

Each pattern names a *meaning* (tool pairing, role order, context exceeded, ...) in words
that several providers share, not one provider's exact sentence. ``classifier`` decides
the order in which the groups are consulted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rule:
    """One named meaning and the regex that recognizes it (case-insensitive)."""

    name: str
    pattern: re.Pattern[str]

    def search(self, text: str) -> bool:
        """True when ``text`` carries this meaning."""
        return self.pattern.search(text) is not None


def _rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:
    return tuple(Rule(name, re.compile(rx, re.I)) for name, rx in pairs)


# Entities and gaps reused below. ``_GAP`` lets a few words (or a JSON path) sit between.
_GAP = r".{0,80}?"
_TOOL_RESULT = (r"(?:tool[_ ]?results?|toolresult|tool[_ ]messages?|function[_ ]?responses?"
                r"|tool[_ ]outputs?|function[_ ]call[_ ]outputs?)")
_TOOL_CALL = r"(?:tool[_ ]?(?:calls?|uses?)|tooluse|function[_ ]?calls?)"
_TOOL_ID = r"(?:tool[_ ]?(?:call|use)[_ ]?ids?)"

# A billing problem or an exhausted long-window quota: waiting seconds will not help.
QUOTA = _rules(
    ("quota_exhausted", r"insufficient[_ ]quota|exceeded (?:your|the) current quota"
     r"|exceeded_current_quota|quota (?:has been )?exhausted|check your plan and billing"),
    ("billing", r"insufficient[_ ](?:balance|credits?|funds)|credit balance is too low"
     r"|out of credits|payment required|billing (?:hard )?limit|spend(?:ing)?[_ ]limit"
     r"|budget (?:has been )?exceeded|exceeded (?:your )?budget"
     # Anthropic's spend limits: "... API usage limits. You will regain access on <date>"
     r"|regain access on"
     # Zhipu GLM (code 1113, a 429): "Insufficient balance or no resource package. Please
     # recharge." and in Chinese "余额不足或无可用资源包,请充值" ("balance insufficient ...
     # please top up"); "您的账户已欠费" ("your account is in arrears").
     r"|please recharge|余额不足|请充值|已欠费"
     # Anthropic (a 429, error_code credits_required): "Usage credits are required for this
     # model."; OpenAI's billing_not_active ("Your account is not active, please check your
     # billing details") and access_terminated: no wait brings them back.
     r"|credits are required|account is not active|access (?:was |has been )?terminated"),
    ("long_window_limit", r"(?:tokens|requests|calls)\s*(?:per|/)\s*(?:day|month)\b|\b(?:tpd|rpd)\b"
     # Cloudflare Workers AI (4006, a 429): "you have used up your daily free allocation of
     # 10,000 neurons"
     r"|(?:daily|monthly) (?:free )?(?:limit|quota|cap|allocation|allowance)"
     r"|per[ _-]day (?:limit|quota)"),
)

# Gemini words its per-minute free-tier quota as a billing problem ("You exceeded your current
# quota, please check your plan and billing details ... Please retry in 26s") and names the
# quota in its QuotaFailure (quotaId "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"):
# a minute's quota refills, a day's (or a limit of 0, a model without a free tier) does not.
MINUTE_QUOTA = re.compile(r"PerMinute|per[_ ]minute", re.I)
LASTING_QUOTA = re.compile(r"PerDay|per[_ ](?:day|month)|\blimit\W{0,3}0\b(?!\.)", re.I)

# A single request larger than a per-minute budget (checked with the Limit/Requested numbers).
PER_MINUTE = re.compile(r"per[ _-]?min(?:ute)?\b|\b(?:tpm|rpm)\b", re.I)
LIMIT_REQUESTED = re.compile(
    r"\blimit\W{0,3}([\d,]+)" + _GAP + r"\brequested\W{0,3}([\d,]+)", re.I | re.S
)
TOO_LARGE_FOR_RATE = re.compile(r"request (?:is )?too large for", re.I)

TRANSIENT = _rules(
    ("rate_limit", r"rate[ _-]?limit|too many (?:concurrent )?requests|throttl"
     # Cerebras: "Tokens per minute limit exceeded - too many tokens processed." (a busy
     # minute, not a long prompt: the "too many tokens" is the minute's).
     r"|(?:tokens|requests|queries|calls) per (?:second|minute) (?:limit|quota)"),
    ("overloaded", r"overload|over capacity|no capacity|capacity (?:exhausted|exceeded)"
     r"|insufficient capacity|at capacity|server (?:is )?busy|engine (?:is )?busy"),
    ("unavailable", r"\bunavailable\b|temporarily|unable to process your request"),
    ("try_later", r"try again (?:later|shortly|in \d)|retry (?:later|shortly|after \d)"
     r"|please wait|wait before"),
    ("exhausted", r"resource(?:s)?(?: has been|_)? ?exhausted"),
    ("timeout", r"timed? ?out\b|deadline[ _]exceeded|gateway timeout"),
    ("server_error", r"internal (?:server )?error|server[ _]error|server had an error"
     r"|bad gateway|connection (?:reset|refused|closed|failed)"),
)

# The model failed to produce valid output, or a policy refused: no ladder step helps.
FATAL_MEANING = _rules(
    ("model_generation", r"failed to call a function|tool call validation failed"
     r"|failed_generation|tool_use_failed"),
    ("policy", r"content[ _](?:policy|filter|management policy)|flagged by|safety system"),
    # A thinking model's own reasoning the client did not send back (DeepSeek: "The
    # `reasoning_content` in the thinking mode must be passed back to the API"; Moonshot:
    # "reasoning_content is missing"): no rung can invent it.
    ("reasoning_missing", r"reasoning_content\W{0,3}" + _GAP + r"(?:must be passed back"
     r"|is missing)|missing\W{0,3}reasoning_content"),
    ("auth", r"invalid (?:x-)?api[ _-]?key|incorrect api key|unauthori[sz]ed"
     r"|permission denied|access denied"),
    # A local server whose machine cannot hold the model (Ollama, a 500: "model requires
    # more system memory (7.5 GiB) than is available (5.2 GiB)"; LM Studio: "Model loading
    # was stopped due to insufficient system resources"): no retry or smaller request loads
    # it. A request's own allocation ("CUDA out of memory. Tried to allocate") is not this.
    ("model_resources", r"requires more (?:system |gpu |video )?(?:memory|ram|vram)\b.{0,30}?than"
     r" (?:is )?available"
     r"|insufficient system (?:resources|memory)"),
    # The client's own output budget (max_tokens) over the model's: compaction cannot help.
    ("output_budget", r"maximum tokens you requested|maximum tokens value"
     r"|maximum allowed number of output tokens"
     # Groq: "`max_tokens` must be less than or equal to `32768`, the maximum value for
     # `max_tokens` ..." (the client's output cap over the model's, whatever the input).
     # TGI: "`max_new_tokens` must be <= 4096" (not "`inputs` tokens + `max_new_tokens`
     # must be <= N", a sum that a shorter input fits).
     r"|(?<!\+ )(?<!\+ `)max(?:_completion|_new)?_tokens\W{0,3} must be "
     r"(?:less than or equal to|<=|at most)"),
)

MEDIA = _rules(
    ("image", r"(?<![\w-])image|\b(?:pictures?|photos?)\b"),
    # A *response* MIME type (Gemini's responseMimeType: "Function calling with a response
    # mime type: 'application/json' is unsupported") is an output setting, not media.
    ("encoding", r"base64|inline_?data|(?<!response[ _])(?<!response)(?:media|mime)[_ ]?type"),
    # Anthropic: "A maximum of 100 PDF pages may be provided.", "The PDF specified was not
    # valid."; a PDF named in a refusal is the document sent.
    ("media", r"too much media|\bmedia\b|\bdocument pages\b|\bpdfs?\b|\bpixels?\b"
     r"|referenced files?|\bfiles? (?:bytes|size|format)|\battachments?\b"
     r"|\b(?:video|audio)\b|input_audio"),
)
# Media the provider reads, but not where they are (OpenAI: "Image URLs are only allowed for
# messages with role 'user', but this message with role 'tool' contains an image URL"): the
# strict rung moves them to a user turn, where degrading them would lose them.
MEDIA_PLACEMENT = _rules(
    ("media_placement", r"only allowed for messages with role\W{0,3}user"
     r"|(?:images?|image urls?|media)\b" + _GAP + r"only (?:allowed|supported) (?:in|for) "
     r"(?:the )?user"
     # a part a tool message cannot hold, where text is all it takes ("Invalid value:
     # 'file'. Supported values are: 'text'.": a PDF or an image in a tool result), or an
     # assistant message, where text and refusals are ("... 'text' and 'refusal'.")
     r"|invalid value\W{1,4}(?:file|image_url|input_audio|input_image|input_file)\W{1,4}"
     r"supported values are\W{1,4}text\W{0,3}(?:and\W{1,3}refusal\W{0,3})?"
     r"(?:$|\.|\s*\")"),
)
# The form of a tool call id (its pattern, characters or length) at the id's own path:
# "messages[3].tool_calls[0].id: string too long", "tool_use.id: String should match
# pattern", "toolUse.toolUseId failed to satisfy constraint". Weighed before overflow: a
# "string too long" about an id is not a long context.
TOOL_ID_FORM = _rules(
    ("tool_id_form", r"(?:tool_calls\W{0,3}\d+\W{0,3}\.?id|tool_?use\.id|tool_?use_?id"
     r"|tool_call_id|tool call ids?)\b" + _GAP + r"(?:pattern|constraint|too long"
     r"|maximum length|alphanumeric|characters|format)"),
)
# The id form Mistral's tokenizer demands ("Tool call id was call_x but must be a-z, A-Z,
# 0-9, with a length of 9"; vLLM's template: "alphanumeric strings with length >= 9"): the
# strict rung then writes nine letters and digits, not only the form every upstream takes.
NINE_CHARACTER_IDS = re.compile(_TOOL_ID + r"\b" + _GAP + r"(?:length(?: of)?\W{0,4}9\b"
                                r"|\b9 (?:characters|chars)\b)", re.I | re.S)
# A model or server that takes no images at all (llama.cpp without its projector answers a
# 500 "image input is not supported"): on a server error with images, media, not a retry.
MEDIA_UNSUPPORTED = _rules(
    ("media_unsupported", r"(?:image|vision|multimodal|media)(?: input)? (?:is |are )?not "
     r"supported|does(?: not|n't) support (?:images?|vision|image input|multimodal)"
     # OpenRouter (and MiMo's API), a 404: "No endpoints found that support image input".
     r"|no endpoints? found that supports? (?:images?|vision|multimodal)"
     # Ollama, a model without a vision projector: "this model is missing data required for
     # image input".
     r"|missing data required for image"),
)
# Content the provider could not read at all; means media only when the request has images.
MEDIA_IF_IMAGES = _rules(
    # Groq's text-only models: "messages[1].content must be a string" (a part list with an
    # image in it).
    ("content_shape", r"did not match any variant|unknown variant|content[ _]type"
     r"|content\W{0,3} must be a string"
     r"|content[ _]part|(?:unsupported|invalid) content|deserializ|multimodal|vision"
     r"|only supported by certain models|content\.\[?\d+\]?\.type"
     r"|(?:could not|cannot|can't|failed to|unable to) decode|unsupported (?:file )?format"),
    # A URL the provider could not fetch (Anthropic: "Unable to download the file. Please
    # verify the URL and try again."): the media rung inlines it or leaves a placeholder.
    ("download", r"(?:could not|cannot|can't|failed to|unable to) (?:download|fetch|retrieve)"
     r"|(?:timeout|timed out|error) while (?:downloading|fetching)"),
)

OVERFLOW = _rules(
    # Not a longer snake_case name (a parameter: Fireworks' "context_length_exceeded_behavior"
    # refused by another server as an unknown argument), but the overflow code itself is.
    ("context", r"context[ _]?(?:length|window|size|limit)(?!_(?!exceeded\b)\w)"
     r"|longer than the context"),
    ("tokens", r"token count" + _GAP + r"exceed|exceeds? the maximum number of tokens"
     r"|too many (?:input |prompt )?tokens|\btokens?\s*>\s*\d|\d\s*tokens?\s*>"
     r"|(?:model )?token limit|max(?:imum)?[ _]tokens?" + _GAP + r"exceed"
     r"|tokens?\b" + _GAP + r"(?:must be (?:<=|less than|at most|no more than)|exceed)"
     # Vertex: "the input token count is N but model only supports up to M"; TGI: "`inputs`
     # must have less than M tokens"
     r"|token count" + _GAP + r"only supports? up to|must have less than \d[\d,]* tokens"
     # Cohere-style: "prompt must be at most 8192 tokens, received 12001 tokens"
     r"|(?:must|should) be (?:<=|less than|at most|no more than|fewer than) \d[\d,]* tokens"),
    ("too_long", r"(?:prompt|input|request|messages?|string|content) (?:is |are )?too long"
     r"|prompt is longer|too long for (?:the )?(?:requested )?model"
     r"|max(?:imum)? length exceeded|reduce the length of the messages"
     # vLLM V1: "is longer than the maximum model length of M"; xAI: "maximum prompt length
     # is M but the request contains N tokens"
     r"|longer than the maximum (?:model|context|sequence) length|maximum prompt length"
     # SambaNova: "the maximum supported sequence length is just M"; DashScope (Qwen):
     # "Range of input length should be [1, M]"
     r"|maximum (?:supported )?sequence length|range of input length"
     # Zhipu GLM (code 1261): "Prompt exceeds max length"; Volcano Engine Ark: "Input length
     # 203743 exceeds the maximum length 202752".
     # DeepInfra: "Requested input length 39818 exceeds maximum input length 32767";
     # TensorRT-LLM: "Prompt length (N) exceeds maximum input length (M)".
     r"|(?:prompt|input)(?: length)?(?: \(?\d[\d,]*\)?)? exceeds? (?:the )?max(?:imum)? "
     r"(?:allowed |input |prompt |model )?length"
     # llama.cpp behind LM Studio: "Cannot truncate prompt with n_keep (15028) >= n_ctx
     # (7424)": the tokens it must keep do not fit the loaded context.
     r"|cannot truncate prompt|n_keep\W{0,4}\d*\W{0,4}>=?\W{0,4}n_ctx"
     # llama.cpp server (a 500): "Input prompt is too big compared to KV size"
     r"|too big compared to (?:the )?kv (?:cache )?size"
     # a server's own length setting named beside the prompt (vLLM's max_model_len,
     # ExLlama / TabbyAPI's max_seq_len: "Prompt length N is greater than max_seq_len M")
     r"|(?:prompt|input|sequence|request)\b" + _GAP + r"\b(?:max_model_len|max_seq_len"
     r"|max_sequence_length|max_position_embeddings|n_ctx)\b"
     r"|\b(?:max_model_len|max_seq_len|max_sequence_length|max_position_embeddings|n_ctx)\b"
     + _GAP + r"\b(?:prompt|input)\b"
     # Zhipu GLM (code 1261) and other Chinese-language servers: "Prompt 超过最大长度"
     r"|(?:prompt|input|输入|上下文|请求|消息|提示)\W{0,3}.{0,12}?(?:超过最大长度|超出最大长度"
     r"|超过最大|超出最大|超长|过长)"),
    # The request's text counted in characters: "the total length of the messages is N
    # characters, which exceeds the limit of M characters".
    ("characters", r"(?:messages?|prompt|input|content|request|conversation)\b" + _GAP
     + r"\d[\d,]* char(?:acter)?s\b" + _GAP + r"exceed"),
)
# The client's output budget B refused beside the context window W: vLLM's "'max_tokens' or
# 'max_completion_tokens' is too large: B. This model's maximum context length is W tokens".
BUDGET_THEN_WINDOW = re.compile(
    r"max(?:_completion)?_tokens\W{0,3}(?: or \W?max_completion_tokens\W?)? is too large\W{0,3}"
    r"([\d,]{1,12})" + _GAP + r"context length is\W{0,3}([\d,]{1,12})", re.I | re.S)
# Overflow wordings that name tokens or the context, i.e. are not ambiguous with bytes.
TOKEN_WORDS = re.compile(r"token|context", re.I)

REQUEST_TOO_LARGE = _rules(
    ("payload", r"request[_ ]too[_ ]large|payload (?:size )?(?:is )?too large"
     r"|(?:payload|request|body) (?:size )?exceeds? the (?:maximum|limit)"
     r"|request exceeds the maximum|entity too large|maximum request size"
     r"|number of bytes|too many bytes"),
)

STRUCTURAL = _rules(
    ("tool_pairing",
     r"\b(?:without|missing|no|did not find|expected)\b" + _GAP + _TOOL_RESULT
     + "|" + _TOOL_RESULT + _GAP + r"(?:corresponding|matching|preced|previous|must (?:be )?(?:a )?"
     r"respon|must follow|immediately after|not found|orphan|cannot be provided|same turn)"
     + "|" + _TOOL_CALL + _GAP + r"(?:must have (?:a |an )?(?:corresponding |matching )?"
     + _TOOL_RESULT + r"|must be followed|followed by|did not have (?:a )?"
     r"respons|don'?t have respons|without|immediately after|matching number|same number"
     r"|number of)"
     + r"|number of function (?:calls|call parts|response parts)"
     r"|(?:function|tool) (?:call|response|result) turn"
     # Bedrock: "Conversation blocks and tool use blocks cannot be provided in the same turn"
     + "|" + _TOOL_CALL + r" blocks?" + _GAP + r"cannot be provided"
     r"|role\W{0,3}tool\W" + _GAP + r"must"),
    ("tool_id", _TOOL_ID + r"\W{0,3}" + _GAP + r"(?:not found|is missing|missing|required"
     r"|must be|should be|invalid|null|alphanumeric|unexpected)"
     r"|unexpected\W{0,3}" + _TOOL_ID + r"|(?:missing|required)" + _GAP + _TOOL_ID),
    # OpenAI on a message name ("Invalid 'messages[1].name': string does not match
    # pattern", older: "'UserProxy Agent' does not match '^[a-zA-Z0-9_-]{1,64}$' -
    # 'messages.1.name'"): the strict rung rewrites the names.
    ("message_name", r"messages\W{0,3}\d+\W{0,3}\.?name\b" + _GAP + r"does not match pattern"
     r"|does not match\W{0,3}\^\[a-zA-Z0-9_-\]" + _GAP + r"messages\W{0,3}\d+\W{0,3}name"),
    # A tool call of the history without its type (OpenAI: "Missing required parameter:
    # 'messages[2].tool_calls[0].type'"): the strict rung types it.
    ("tool_call_type", r"(?:missing|required)" + _GAP + r"tool_calls\W{0,3}\d+\W{0,3}\.?type\b"),
    # Anthropic thinking parts kept in a chat assistant turn (OpenAI: "Invalid value:
    # 'thinking'. Supported values are: 'text' and 'refusal'."): the strict rung drops them.
    ("thinking_part", r"invalid value\W{0,3}(?:redacted_)?thinking\b"),
    # OpenAI's newer name of the system role refused by an upstream that predates it
    # (OpenAI's older models: "Invalid value: 'developer'. Supported values are: 'system',
    # ..."; Groq: "discriminator property 'role' has invalid value 'developer'"; serde
    # servers: "unknown variant `developer`"): the strict rung sends it as system.
    ("developer_role", r"(?:invalid value|unknown variant|(?:unexpected|unknown|unsupported"
     r"|invalid) role)\W{0,3}developer\b|role\W{0,3}developer\W{0,3}(?:is )?not supported"
     # jsonschema (Kilo): "'developer' is not one of ['system', 'user', ...] - 'messages.[6].role'"
     r"|\Wdeveloper\W{0,3} is not one of\b"),
    ("duplicate", r"duplicate" + _GAP + r"(?:ids?|values?|tool|call)\b|must be unique"
     r"|" + _TOOL_ID + r"\W" + _GAP + r"(?:appears?|occurs?|used|given|sent) (?:more than once"
     r"|twice|multiple times)"),
    ("role_order", r"(?:must|should) (?:be )?alternat|alternat\w* (?:between )?(?:user|roles)"
     r"|successive (?:user|assistant)|consecutive (?:user|assistant)|interleave"
     r"|roles in a row|unexpected role|(?:valid|invalid) role|expected (?:last |first )?role"
     r"|(?:first|last|initial|final) (?:message|turn|content)" + _GAP
     + r"(?:must|should|has to|needs to)\b" + _GAP + r"(?:be\b|user|assistant|human|role)"
     r"|must (?:start|begin|end) with (?:a |an |the )?\W?(?:user|assistant|human)"
     r"|comes immediately after|role order|message order"
     # llama.cpp: "Cannot have 2 or more assistant messages at the end of the list."
     r"|(?:2|two) or more (?:assistant|user) messages"
     # Qwen's chat template (LM Studio, vLLM): "No user query found in messages." The strict
     # rung puts a user turn in front of a history that has none.
     r"|no user (?:query|message|turn)s? (?:was )?found"),
    ("empty_content",
     r"(?:content|text|message|parts?|contents)\b" + _GAP
     + r"(?:\bis empty|\bare empty|\bbe empty|\bblank\b|non-?empty|non-whitespace"
     r"|not specified|got null|must be a string|expected a string|initialized field)"
     r"|empty (?:text|content|message|string|parameter|parts?|array)|required oneof field"
     # Bedrock InvokeModel: "#/messages/3/content: expected minimum item count: 1, found: 0";
     # Vertex: "it must include at least one parts field"; DeepSeek (serde): "messages[3]:
     # invalid type: null, expected a string".
     r"|(?:content|parts?|contents)\b" + _GAP + r"minimum item count\W{0,3}1\b"
     r"|at least one (?:parts?|contents?) field"
     r"|(?:messages?\W{0,3}\d+\W{0,3}|content\W{1,3})invalid type\W{0,3}null\W{0,3}"
     r"expected a string"
     # Cohere: "message must be at least 1 token long or tool results must be specified";
     # Xiaomi: "assistant content must contain at least one part"; Mistral: "Assistant
     # message must have either content or tool_calls".
     r"|(?:content|text|message)\b" + _GAP + r"(?:at least (?:1|one) (?:token|part|character"
     r"|block|content)|must (?:have|contain) (?:either )?(?:some )?(?:content|text)\b)"),
    # A call's arguments in the history are not JSON (a model's cut-off output): vLLM and
    # other servers parse every call through their chat template ("arguments must be a
    # valid JSON object string", Python's own "Expecting ',' delimiter: line 1 column 25"),
    # Anthropic behind a translation ("tool_use.input: Input should be a valid dictionary").
    ("tool_arguments",
     r"\barguments\b" + _GAP + r"(?:valid json|json object|json string|not (?:valid )?json"
     r"|(?:could not|cannot|failed to|unable to) (?:be )?(?:parse|decode))"
     r"|(?:parse|decode)\w*" + _GAP + r"(?:tool|function)[_ ]?call[_ ]?arguments"
     r"|tool_use\W{0,3}input\W" + _GAP + r"valid dictionary|invalid_tool_call_format"
     r"|\b(?:expecting (?:'[,:]' delimiter|value|property name enclosed in double quotes)"
     r"|unterminated string starting at|extra data|invalid control character at)"
     r": line \d+ column \d+"),
)


_MISSING_ITEM = (r"item with id\W" + _GAP + r"not found|items are not persisted"
                 r"|item_reference" + _GAP + r"not found")
# The agent wires' own history rules (Responses items, Messages blocks): what a stricter,
# wire-native projection can fix.
WIRE_HISTORY = _rules(
    ("reasoning_item", r"without its required (?:following|'?reasoning'?) item"
     r"|of type '?reasoning'? was provided|reasoning[ _](?:input[ _])?items?" + _GAP
     + r"(?:not supported|invalid|required|not found)"),
    ("missing_item", _MISSING_ITEM),
    # Reasoning text another backend took ("Invalid 'input[3].content': array too long.
    # Expected an array with maximum length 0"): the strict rung leaves it out.
    ("reasoning_content", r"expected an array with maximum length 0\b"),
    ("item_id", r"expected an id that begins with|invalid\W+input\[\d+\]\.(?:id|call_id)"),
    ("encrypted_content", r"encrypted[ _]content" + _GAP
     + r"(?:could not|cannot|can't|invalid|verif|decrypt|not supported)"),
    ("thinking", r"`?(?:redacted_)?thinking`? (?:or `?redacted_thinking`? )?blocks?"
     r"|thinking\.signature|invalid\W{0,3}signature|signature\W{0,3}(?:in|for)\W{0,3}"
     r"`?thinking|expected\W{0,3}`?thinking|cannot be\W{0,3}`?thinking"),
    ("tools_undeclared", r"must define tools|tools? (?:must|should) be (?:defined|declared)"
     # Bedrock Converse: "The toolConfig field must be defined when using toolUse and
     # toolResult content blocks."
     r"|tool_?config field must be (?:defined|provided)"),
    ("cache_control", r"cache_control|cache control|cache breakpoints?"),
    ("trailing_whitespace", r"trailing whitespace"),
    ("prefill", r"pre-?fill"),  # Bedrock (Llama): "would pre-fill the `assistant` response"
)
# An item the provider cannot find (Responses answers it with a 404 at times): the input
# names it, so it is a repairable history, not a missing route.
MISSING_ITEM = re.compile(_MISSING_ITEM, re.I)

# Code names (``code``/``type``/``status`` fields, ``x-amzn-errortype``), lowercase.
QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "exceeded_current_quota_error",
        "billing_hard_limit_reached",
        "insufficient_balance",
        "payment_required",
        "budget_exceeded",
        "usage_limit_reached",
        "usage_not_included",
        "credits_required",
        "billing_not_active",
        "access_terminated",
    }
)
FATAL_CODES = frozenset(
    {
        "tool_use_failed",
        "content_policy_violation",
        "content_filter",
        "invalid_api_key",
        "authentication_error",
        "permission_error",
        "permission_denied",
        "unauthenticated",
        "accessdeniedexception",
        "model_not_found",
        "not_found_error",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "rate_limit_error",
        "rate_limit_exceeded",
        "rate_limited",
        "overloaded_error",
        "engine_overloaded_error",
        "server_error",
        "service_unavailable",
        "resource_exhausted",
        "unavailable",
        "deadline_exceeded",
        "model_capacity_exhausted",
        "throttlingexception",
        "serviceunavailableexception",
        "internalserverexception",
        "modelnotreadyexception",
        "modelerrorexception",
        "modelstreamerrorexception",
        "modeltimeoutexception",
        "timeout",
    }
)
OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "model_context_window_exceeded"}
)
REQUEST_TOO_LARGE_CODES = frozenset({"request_too_large", "payload_too_large"})
MEDIA_CODES = frozenset(
    {"invalid_image", "invalid_image_format", "invalid_image_url", "image_parse_error",
     "image_too_large"}
)
# Gemini counting a turn's function responses against its function calls ("Please ensure
# that the number of function response parts is equal to the number of function call
# parts of the function call turn."): litellm's translation keeps one of two identical
# calls, so the strict rung merges them.
CALL_PART_COUNT = re.compile(r"number of function response parts\b.{0,40}function call parts",
                             re.IGNORECASE | re.DOTALL)

# Mistral (its API, and mistral_common behind vLLM): "Unexpected role 'user' after role
# 'tool'": after tool results only more results or an assistant turn may come.
ASSISTANT_AFTER_TOOLS = re.compile(
    r"unexpected role\W{0,3}(?:user|system|developer)\W{0,3} after role\W{0,3}tool\b",
    re.IGNORECASE)

STRUCTURAL_CODES = frozenset({"invalid_request_message_order"})


def first_rule(rules: Sequence[Rule], text: str) -> str | None:
    """The name of the first rule that matches ``text``, else None."""
    for rule in rules:
        if rule.search(text):
            return rule.name
    return None
