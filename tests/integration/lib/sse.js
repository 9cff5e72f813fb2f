'use strict';
/*
 * sse.js - reading server-sent events as the LLM APIs send them, and
 * rebuilding the answer a stream carries so it can be compared with the
 * non-stream JSON answer (and the other way round).
 *
 * Summaries are the comparable core of an answer: text, tool calls, finish
 * reason and usage; ids and timestamps are left out on purpose.
 */

/* Incremental W3C EventSource parser: feed text, get complete events back. */
class SSEParser {
    constructor() {
        this.rest = '';
        this.event = '';
        this.data = [];
    }

    feed(text) {
        const events = [];
        const lines = (this.rest + text).split(/\r\n|\n|\r/);
        this.rest = lines.pop(); /* an unterminated line waits for more input */
        for (const line of lines) {
            if (line === '') {
                if (this.data.length)
                    events.push({event: this.event, data: this.data.join('\n')});
                this.event = '';
                this.data = [];
            } else if (!line.startsWith(':')) {
                this._field(line);
            }
        }
        return events;
    }

    _field(line) {
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' '))
            value = value.slice(1);
        if (name === 'event')
            this.event = value;
        else if (name === 'data')
            this.data.push(value);
    }
}

function parseSSE(text) {
    return new SSEParser().feed(text + '\n\n');
}

/* ------------------------------------------------------------------------ */
/* OpenAI                                                                    */

function normToolCalls(calls) {
    return (calls || []).map((c) => ({
        id: c.id, name: c.function.name, arguments: JSON.parse(c.function.arguments || '{}'),
    }));
}

/* Comparable core of a chat.completion JSON answer. */
function chatSummary(json) {
    const choice = json.choices[0];
    return {
        role: choice.message.role,
        content: choice.message.content || '',
        tool_calls: normToolCalls(choice.message.tool_calls),
        finish_reason: choice.finish_reason,
        usage: json.usage === undefined ? null : json.usage,
    };
}

/* Merge one streamed tool-call delta into the calls assembled so far. */
function mergeToolCall(calls, d) {
    const call = calls[d.index] || (calls[d.index] = {id: '', function: {name: '', arguments: ''}});
    if (d.id)
        call.id = d.id;
    if (d.function && d.function.name)
        call.function.name += d.function.name;
    if (d.function && d.function.arguments)
        call.function.arguments += d.function.arguments;
}

/*
 * Rebuild a chat answer from chat.completion.chunk events. Returns the
 * summary plus `done` (the stream ended with [DONE]), `id`, `model` and the
 * parsed chunks.
 */
function assembleChat(events) {
    const out = {role: null, content: '', tool_calls: [], finish_reason: null, usage: null,
        done: false, id: null, model: null, chunks: []};
    const calls = [];
    for (const ev of events) {
        if (ev.data === '[DONE]') {
            out.done = true;
            continue;
        }
        const chunk = JSON.parse(ev.data);
        out.chunks.push(chunk);
        out.id = out.id || chunk.id;
        out.model = out.model || chunk.model;
        if (chunk.usage)
            out.usage = chunk.usage;
        for (const choice of chunk.choices || []) {
            const d = choice.delta || {};
            out.role = d.role || out.role;
            if (typeof d.content === 'string')
                out.content += d.content;
            (d.tool_calls || []).forEach((tc) => mergeToolCall(calls, tc));
            out.finish_reason = choice.finish_reason || out.finish_reason;
        }
    }
    out.tool_calls = normToolCalls(calls.filter(Boolean));
    return out;
}

function completionSummary(json) {
    const choice = json.choices[0];
    return {text: choice.text, finish_reason: choice.finish_reason, usage: json.usage || null};
}

function assembleCompletion(events) {
    const out = {text: '', finish_reason: null, usage: null, done: false, chunks: []};
    for (const ev of events) {
        if (ev.data === '[DONE]') {
            out.done = true;
            continue;
        }
        const chunk = JSON.parse(ev.data);
        out.chunks.push(chunk);
        if (chunk.usage)
            out.usage = chunk.usage;
        for (const choice of chunk.choices || []) {
            out.text += choice.text || '';
            out.finish_reason = choice.finish_reason || out.finish_reason;
        }
    }
    return out;
}

/* ------------------------------------------------------------------------ */
/* Anthropic                                                                 */

function normBlock(b) {
    if (b.type === 'text')
        return {type: 'text', text: b.text};
    if (b.type === 'tool_use')
        return {type: 'tool_use', id: b.id, name: b.name, input: b.input};
    return b;
}

/* Comparable core of an Anthropic message (usage: the token counts only). */
function messageSummary(msg) {
    return {
        role: msg.role,
        content: msg.content.map(normBlock),
        stop_reason: msg.stop_reason,
        stop_sequence: msg.stop_sequence === undefined ? null : msg.stop_sequence,
        usage: {input_tokens: msg.usage.input_tokens, output_tokens: msg.usage.output_tokens},
    };
}

/* Apply one Anthropic stream event to the message being rebuilt. */
function applyMessageEvent(msg, d) {
    const block = msg && msg.content[d.index];
    switch (d.type) {
    case 'content_block_start':
        msg.content[d.index] = {...d.content_block, partial: ''};
        break;
    case 'content_block_delta':
        if (d.delta.type === 'text_delta')
            block.text += d.delta.text;
        else if (d.delta.type === 'input_json_delta')
            block.partial += d.delta.partial_json;
        break;
    case 'content_block_stop':
        if (block.type === 'tool_use')
            block.input = block.partial ? JSON.parse(block.partial) : block.input;
        delete block.partial;
        break;
    case 'message_delta':
        Object.assign(msg, d.delta);
        msg.usage = {...msg.usage, ...d.usage};
        break;
    default: /* ping, message_stop: nothing to merge */
        break;
    }
}

/*
 * Rebuild an Anthropic message from its event stream. Returns {message,
 * types (event names in order), done (message_stop seen), errors}.
 */
function assembleMessage(events) {
    const out = {message: null, types: [], done: false, errors: []};
    for (const ev of events) {
        const d = JSON.parse(ev.data);
        out.types.push(ev.event || d.type);
        if (d.type === 'message_start')
            out.message = {...d.message, content: []};
        else if (d.type === 'message_stop')
            out.done = true;
        else if (d.type === 'error')
            out.errors.push(d.error);
        else
            applyMessageEvent(out.message, d);
    }
    return out;
}

module.exports = {
    SSEParser, parseSSE,
    chatSummary, assembleChat, completionSummary, assembleCompletion,
    messageSummary, assembleMessage,
};
