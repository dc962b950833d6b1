"""The tool loop of a reply (:func:`tool_loop`), and one round of it: the tool calls of
one model response, answered.

Every ``tool_use`` block of a response needs its ``tool_result`` in the next request, so a
call that is not run is answered too, with an error result saying why:

- calls past ``brain.max_tool_calls_per_response`` (a response with 50 ``tool_use`` blocks
  ran all 50 searches, and sent all their results back in every later round);
- a call cut by ``max_tokens`` (or the context window) while the model was writing its
  input (the SDK reads the partial JSON as it can: ``{"query": "boi"}``). Before, the
  reply ended there with "cut short, say continue" and the tool never ran; answered, the
  model can call it again;
- a call whose input is not JSON, or not a JSON object (bot.brain.stream_message): the
  error names the problem, and the model corrects it in its next round (bounded by
  ``brain.max_tool_iterations`` like any round).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.brain.anthropic_api import MessagesCaller, as_params, text_of
from bot.brain.anthropic_reply import CUT_REASONS, ReplyParts, account, request_params
from bot.brain.anthropic_stream import DeltaForwarder
from bot.brain.prompt_cache import with_breakpoints
from bot.brain.stream_message import input_problem
from bot.brain.tool_calls import Tool, execute, tool_map
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")

OVER_CAP = (
    "Not run: at most {cap} tool calls are run per response "
    "(brain.max_tool_calls_per_response). Ask for fewer at once; call it again in your "
    "next response if you still need it."
)
# After the last round of tool results (brain.max_tool_iterations): the final call carries
# tool_choice "none", and without a word of why, a model that meant to search again wrote
# "Let me search once more." and stopped there, which went out as the whole answer.
LAST_ROUND = (
    "That was the last round of tool calls for this reply ({limit}, "
    "brain.max_tool_iterations): no more tools can run. Write your answer now with what "
    "you have, and say what you could not find or check."
)
# A call whose input could not be read (bot.brain.stream_message): answered, the model
# can correct it in its next round; before, the whole answer was asked for again and,
# garbled three times, the reply failed with the model none the wiser.
BAD_INPUT = (
    "Not run: {problem}. Call the tool again with a JSON object that matches its input_schema."
)
CUT_CALL = (
    "Not run: your response was cut off (max_tokens or the context window) while you were "
    "writing this call, so its input is incomplete. Call it again if you still need it."
)


def cut_call(message: Any) -> bool:
    """Whether ``message`` was cut (``max_tokens``, the context window) inside a
    ``tool_use`` block (its last block; a call followed by more content was complete)."""
    content = message.content
    cut = message.stop_reason in CUT_REASONS
    return cut and bool(content) and content[-1].type == "tool_use"


def wants_tools(message: Any) -> bool:
    """Whether ``message`` asks for tool calls to be answered: it stopped for them, or it
    was cut while writing one."""
    if not any(b.type == "tool_use" for b in message.content):
        return False
    return message.stop_reason == "tool_use" or cut_call(message)


async def answer_calls(
    available: Mapping[str, Tool], message: Any, cap: int
) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks for every ``tool_use`` of ``message``, in order: the
    first ``cap`` calls run, the rest (and a call cut at ``max_tokens``) get an error."""
    calls = [b for b in message.content if b.type == "tool_use"]
    cut = len(calls) - 1 if cut_call(message) else None  # the index of a cut call
    if len(calls) > cap:
        log.warning(
            "a response asked for %d tool calls; the first %d run, the rest get an error "
            "(brain.max_tool_calls_per_response)",
            len(calls),
            cap,
        )
    results = []
    for n, call in enumerate(calls):
        if n >= cap:
            content, is_error = OVER_CAP.format(cap=cap), True
        elif n == cut:
            log.warning("tool call %s was cut at max_tokens; answered with an error", call.name)
            content, is_error = CUT_CALL, True
        elif (problem := input_problem(call)) is not None:
            log.warning("tool call %s: %s; answered with an error", call.name, problem)
            content, is_error = BAD_INPUT.format(problem=problem), True
        else:
            content, is_error = await execute(available, call.name, call.input)
            log.info(
                "tool %s -> %s (%d chars)", call.name, "error" if is_error else "ok", len(content)
            )
        results.append(
            {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": content,
                "is_error": is_error,
            }
        )
    return results


async def tool_loop(
    config: AppConfig,
    api: MessagesCaller,
    alias: str,
    system: str,
    messages: list[dict[str, Any]],
    tools: list[Tool],
    turn: ReplyParts,
    deltas: DeltaForwarder,
) -> None:
    """Call the model through ``api``, run the tools it asks for, repeat; at most
    ``brain.max_tool_iterations`` rounds of tools, then a final answer without them;
    at most ``brain.max_tool_calls_per_response`` calls run per round
    (:func:`answer_calls`)."""
    available = tool_map(tools)
    limit = config.brain.max_tool_iterations
    cap = config.brain.max_tool_calls_per_response
    # the newest owner message: the end of the conversation, a cache breakpoint each round
    anchor = messages[-1] if messages else None
    for iteration in range(limit + 1):
        params = request_params(config, alias, system, messages)
        if tools:
            params["tools"] = [t.spec() for t in tools]
            if iteration == limit:
                params["tool_choice"] = {"type": "none"}
        if config.brain.prompt_cache:
            params = with_breakpoints(params, anchor)
        deltas.new_call()
        message = await api.call(params, deltas)
        account(config, turn, alias, message)
        turn.stop_reason = message.stop_reason
        text = text_of(message).strip()
        if text:
            turn.texts.append(text)
        turn.thinking.extend(b.thinking for b in message.content if b.type == "thinking")
        paused = as_params(message.content) if message.stop_reason == "pause_turn" else []
        if paused:
            # The API paused a long turn: sent back as it is, the model continues it
            # (ended here, the reply stopped wherever the pause fell).
            messages.append({"role": "assistant", "content": paused})
            continue
        if not wants_tools(message) or iteration == limit:
            # (the last round asked for no tools: any it holds anyway are not run, as
            # their results would never be sent; before session 40 they ran for nothing)
            return
        messages.append({"role": "assistant", "content": as_params(message.content)})
        results: list[dict[str, Any]] = await answer_calls(available, message, cap)
        if iteration + 1 == limit:
            results.append({"type": "text", "text": LAST_ROUND.format(limit=limit)})
        messages.append({"role": "user", "content": results})
    log.warning("tool loop ended at the iteration limit (%d)", limit)


__all__ = [
    "BAD_INPUT",
    "CUT_CALL",
    "LAST_ROUND",
    "OVER_CAP",
    "answer_calls",
    "cut_call",
    "tool_loop",
    "wants_tools",
]
