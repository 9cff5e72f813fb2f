'use strict';
/*
 * formats.js - the wire formats the mock upstream speaks: OpenAI chat
 * completions, legacy completions, embeddings, models and the Responses API,
 * the Anthropic Messages API, as whole JSON answers and as SSE event streams,
 * and both APIs' error shapes. Pure functions: each builder takes a `call` (what the
 * server knows about one request, see upstream.js) and returns
 * {status, headers, parts}, where parts are the strings written one after
 * the other (SSE events, or the one JSON body).
 */
const crypto = require('node:crypto');

const BIG_PIECE = 64 * 1024; /* piece size for x-mock-size answers and big JSON bodies */
const EMBEDDING_DIMS = 8;
const SNIPPET_CHARS = 40;
const FILLER = ' lorem ipsum dolor sit amet, consectetur adipiscing elit';

const MODELS = ['gpt-4o-mini', 'gpt-4o', 'text-embedding-3-small', 'gpt-3.5-turbo-instruct',
    'claude-sonnet-4-5'];

/* ------------------------------------------------------------------------ */
/* Reading requests                                                          */

/* Text of one message's content: a string, or the text parts of an array. */
function contentText(content) {
    if (typeof content === 'string')
        return content;
    if (!Array.isArray(content))
        return '';
    return content
        .map((p) => (p && typeof p.text === 'string' ? p.text : ''))
        .filter((s) => s !== '')
        .join(' ');
}

/* A Responses API item list (as opposed to the strings of an embeddings input). */
const isItemList = (input) => Array.isArray(input) && input.some((i) => i && typeof i === 'object');

/* The text the answer quotes: the last user turn, the prompt, or the input. */
function lastUserText(body) {
    if (Array.isArray(body.messages)) {
        const users = body.messages.filter((m) => m && m.role === 'user');
        return users.length ? contentText(users[users.length - 1].content) : '';
    }
    if (isItemList(body.input)) {
        const users = body.input.filter((m) => m && m.role === 'user');
        return users.length ? contentText(users[users.length - 1].content) : '';
    }
    if (body.prompt !== undefined)
        return [].concat(body.prompt).map(String).join(' ');
    if (body.input !== undefined)
        return [].concat(body.input).map(String).join(' ');
    return '';
}

/* Everything the model would read, for the prompt token count. */
function promptText(body) {
    const parts = [];
    if (body.system !== undefined)
        parts.push(contentText(body.system));
    if (typeof body.instructions === 'string')
        parts.push(body.instructions);
    if (Array.isArray(body.messages))
        for (const m of body.messages)
            parts.push(contentText(m && m.content));
    if (isItemList(body.input))
        for (const m of body.input)
            parts.push(contentText(m && m.content));
    else
        parts.push(lastUserText({prompt: body.prompt, input: body.input}));
    return parts.join(' ');
}

/* Deterministic stand-in for a tokenizer: words, at least one. */
function countTokens(text) {
    const words = String(text).trim().split(/\s+/).filter(Boolean);
    return Math.max(1, words.length);
}

/* ------------------------------------------------------------------------ */
/* Answer content                                                            */

/* "mock answer #SEQ to: SNIPPET", padded with filler to size bytes if asked. */
function answerText(seq, question, size) {
    let text = `mock answer #${seq} to: ${Array.from(question).slice(0, SNIPPET_CHARS).join('')}`;
    if (size > text.length) {
        const pad = FILLER.repeat(Math.ceil((size - text.length) / FILLER.length));
        text = (text + pad).slice(0, size);
    }
    return text;
}

/*
 * x-mock-echo: the whole question, not its first SNIPPET_CHARS characters,
 * and whom the call came from: "mock answer #SEQ to: QUESTION [auth H]",
 * H the first 8 hex digits of the SHA-256 of the credential header as
 * received (Authorization, else x-api-key, else empty), and " tag T" when
 * the call carried an x-mock-tag. A cached answer then shows which
 * question, which tenant and which tag it was made for (bench/soak).
 */
function echoText(seq, question, credential, tag) {
    const auth = crypto.createHash('sha256').update(credential).digest('hex').slice(0, 8);
    return `mock answer #${seq} to: ${question} [auth ${auth}${tag !== undefined ? ` tag ${tag}` : ''}]`;
}

/*
 * An answer by meaning: the same text for every question of one meaning
 * (the mock's by-meaning mode), so a cached answer is right for a question
 * exactly when both carry the same meaning id.
 */
function meaningText(id, size) {
    let text = `mock answer by meaning ${id}`;
    if (size > text.length) {
        const pad = FILLER.repeat(Math.ceil((size - text.length) / FILLER.length));
        text = (text + pad).slice(0, size);
    }
    return text;
}

/*
 * Cut text into n pieces of similar length, never inside a code point. A text of one
 * UTF-16 unit per code point (x-mock-size's filler) is cut by slicing: an array of every
 * character of an 80 MB answer (the backpressure test's, where tcp_rmem allows 32 MiB) took
 * the mock 30 s before its first byte, past the client's timeout.
 */
function splitPieces(text, n) {
    if (!/[\ud800-\udfff]/.test(text)) {
        const count = Math.max(1, Math.min(n, text.length));
        const per = Math.ceil(text.length / count);
        const pieces = [];
        for (let i = 0; i < text.length; i += per)
            pieces.push(text.slice(i, i + per));
        return pieces.length ? pieces : [''];
    }
    const chars = Array.from(text);
    const count = Math.max(1, Math.min(n, chars.length));
    const per = Math.ceil(chars.length / count);
    const pieces = [];
    for (let i = 0; i < chars.length; i += per)
        pieces.push(chars.slice(i, i + per).join(''));
    return pieces.length ? pieces : [''];
}

/* How many pieces an answer of this text is streamed in. */
function pieceCount(text, controls) {
    return Math.max(controls.chunks, Math.ceil(Buffer.byteLength(text) / BIG_PIECE));
}

/* Arguments for a call to tool: one plausible value per schema property. */
function toolArguments(schema, question, seq) {
    const props = (schema && schema.properties) || {};
    const args = {};
    for (const [name, prop] of Object.entries(props)) {
        const type = prop && prop.type;
        if (prop && Array.isArray(prop.enum) && prop.enum.length)
            args[name] = prop.enum[0];
        else if (type === 'integer' || type === 'number')
            args[name] = seq;
        else if (type === 'boolean')
            args[name] = true;
        else if (type === 'array')
            args[name] = [];
        else if (type === 'object')
            args[name] = {};
        else
            args[name] = `call #${seq}: ${question.slice(0, SNIPPET_CHARS)}`;
    }
    if (Object.keys(args).length === 0)
        args.input = `call #${seq}: ${question.slice(0, SNIPPET_CHARS)}`;
    return args;
}

/* The first tool of an OpenAI (function), Responses API or Anthropic tool list, normalised. */
function firstTool(tools) {
    if (!Array.isArray(tools) || tools.length === 0)
        return null;
    const t = tools[0] || {};
    if (t.function)
        return {name: t.function.name, schema: t.function.parameters};
    if (t.type === 'function')
        return {name: t.name, schema: t.parameters};
    return {name: t.name, schema: t.input_schema};
}

/* Unit-length float32-exact vector derived from the text's SHA-256. */
/*
 * A unit vector derived from the text: DIMS floats, 8 from each SHA-256 of
 * the text (the first of the plain text, the next of "N:" and the text).
 */
function embeddingVector(text, dims = EMBEDDING_DIMS) {
    const raw = [];
    for (let block = 0; raw.length < dims; block++) {
        const digest = crypto.createHash('sha256')
            .update(block === 0 ? String(text) : `${block}:${text}`).digest();
        for (let i = 0; i < 8 && raw.length < dims; i++)
            raw.push(digest.readInt32LE(i * 4) / 2 ** 31);
    }
    const norm = Math.sqrt(raw.reduce((s, x) => s + x * x, 0)) || 1;
    return raw.map((x) => Math.fround(x / norm));
}

function base64Floats(vec) {
    const buf = Buffer.alloc(vec.length * 4);
    vec.forEach((x, i) => buf.writeFloatLE(x, i * 4));
    return buf.toString('base64');
}

/* ------------------------------------------------------------------------ */
/* Wire formats                                                              */

const sseEvent = (data, event) => (event ? `event: ${event}\n` : '') + `data: ${data}\n\n`;

function jsonAnswer(status, obj, extraHeaders) {
    const body = JSON.stringify(obj);
    const headers = {'content-type': 'application/json', ...extraHeaders};
    return {status, headers, parts: [body]};
}

function sseAnswer(events, extraHeaders) {
    const headers = {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        ...extraHeaders,
    };
    return {status: 200, headers, parts: events};
}

const OPENAI_ERROR_TYPES = {
    400: ['invalid_request_error', null], 401: ['invalid_request_error', 'invalid_api_key'],
    403: ['invalid_request_error', 'unsupported_country_region_territory'],
    404: ['invalid_request_error', 'unknown_url'], 429: ['requests', 'rate_limit_exceeded'],
};
const ANTHROPIC_ERROR_TYPES = {
    400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error',
    404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error',
    529: 'overloaded_error',
};

function openaiError(status, message) {
    const [type, code] = OPENAI_ERROR_TYPES[status] || ['server_error', null];
    return jsonAnswer(status, {error: {message, type, param: null, code}});
}

function anthropicError(status, message) {
    const type = ANTHROPIC_ERROR_TYPES[status] || 'api_error';
    return jsonAnswer(status, {type: 'error', error: {type, message}});
}

/* Completion tokens: the x-mock-completion-tokens override, else the count of the text. */
function completionCount(call, n) {
    return call.controls.completionTokens !== undefined ? call.controls.completionTokens : n;
}

/* OpenAI counts cached prompt tokens inside prompt_tokens. */
function openaiUsage(prompt, completion, call) {
    const cached = call ? call.controls.cacheRead : 0;
    if (call)
        completion = completionCount(call, completion);
    return {
        prompt_tokens: prompt + cached,
        completion_tokens: completion,
        total_tokens: prompt + cached + completion,
        prompt_tokens_details: {cached_tokens: cached, audio_tokens: call ? call.controls.audioPrompt : 0},
        completion_tokens_details: {
            reasoning_tokens: 0, audio_tokens: call ? call.controls.audioCompletion : 0,
            accepted_prediction_tokens: 0, rejected_prediction_tokens: 0,
        },
    };
}

/* The assistant turn of a chat answer: text, or a call to the first tool. */
function chatOutcome(call) {
    const tool = firstTool(call.body.tools);
    if (!tool)
        return {text: call.text, tool: null, finish: 'stop', completionTokens: countTokens(call.text)};
    const args = JSON.stringify(toolArguments(tool.schema, call.question, call.seq));
    return {
        text: null,
        tool: {id: `call_mock${call.seq}`, name: tool.name, args},
        finish: 'tool_calls',
        completionTokens: countTokens(args),
    };
}

function chatCompletion(call) {
    const out = chatOutcome(call);
    const message = {role: 'assistant', content: out.text, refusal: null, annotations: []};
    if (out.tool)
        message.tool_calls = [{
            id: out.tool.id, type: 'function',
            function: {name: out.tool.name, arguments: out.tool.args},
        }];
    return jsonAnswer(200, {
        id: call.id, object: 'chat.completion', created: call.created, model: call.model,
        choices: [{index: 0, message, logprobs: null, finish_reason: out.finish}],
        usage: openaiUsage(call.promptTokens, out.completionTokens, call),
        service_tier: 'default', system_fingerprint: 'fp_mock',
    }, call.openaiHeaders);
}

/*
 * OpenAI streams: every chunk carries "usage": null when include_usage is on,
 * and a last chunk with empty choices carries the usage, before [DONE].
 */
function openaiStream(call, object, choiceDeltas, usage) {
    const includeUsage = !!(call.body.stream_options && call.body.stream_options.include_usage);
    const base = {id: call.id, object, created: call.created, model: call.model};
    if (object === 'chat.completion.chunk')
        Object.assign(base, {service_tier: 'default', system_fingerprint: 'fp_mock'});
    const chunk = (choices) => JSON.stringify({...base, choices, ...(includeUsage ? {usage: null} : {})});
    const events = choiceDeltas.map((c) => sseEvent(chunk([c])));
    if (includeUsage)
        events.push(sseEvent(JSON.stringify({...base, choices: [], usage})));
    events.push(sseEvent('[DONE]'));
    return sseAnswer(events, call.openaiHeaders);
}

function chatStream(call) {
    const out = chatOutcome(call);
    const choice = (delta, finish = null) => ({index: 0, delta, logprobs: null, finish_reason: finish});
    const deltas = [];
    if (out.tool) {
        deltas.push(choice({
            role: 'assistant', content: null,
            tool_calls: [{index: 0, id: out.tool.id, type: 'function',
                function: {name: out.tool.name, arguments: ''}}],
            refusal: null,
        }));
        for (const piece of splitPieces(out.tool.args, pieceCount(out.tool.args, call.controls)))
            deltas.push(choice({tool_calls: [{index: 0, function: {arguments: piece}}]}));
    } else {
        deltas.push(choice({role: 'assistant', content: '', refusal: null}));
        for (const piece of splitPieces(out.text, pieceCount(out.text, call.controls)))
            deltas.push(choice({content: piece}));
    }
    deltas.push(choice({}, out.finish));
    return openaiStream(call, 'chat.completion.chunk', deltas,
        openaiUsage(call.promptTokens, out.completionTokens, call));
}

function textCompletion(call) {
    return jsonAnswer(200, {
        id: call.id.replace('chatcmpl', 'cmpl'), object: 'text_completion', created: call.created,
        model: call.model,
        choices: [{text: call.text, index: 0, logprobs: null, finish_reason: 'stop'}],
        usage: openaiUsage(call.promptTokens, countTokens(call.text), call),
    }, call.openaiHeaders);
}

function textCompletionStream(call) {
    const choice = (text, finish = null) => ({text, index: 0, logprobs: null, finish_reason: finish});
    const deltas = splitPieces(call.text, pieceCount(call.text, call.controls)).map((p) => choice(p));
    deltas.push(choice('', 'stop'));
    const streamCall = {...call, id: call.id.replace('chatcmpl', 'cmpl')};
    return openaiStream(streamCall, 'text_completion', deltas,
        openaiUsage(call.promptTokens, countTokens(call.text), call));
}

function embeddings(call) {
    const inputs = [].concat(call.body.input === undefined ? [] : call.body.input);
    const asBase64 = call.body.encoding_format === 'base64';
    /* "dimensions" as OpenAI's text-embedding-3 models take it; 8 when absent */
    const d = call.body.dimensions;
    const dims = Number.isInteger(d) && d > 0 && d <= 4096 ? d : EMBEDDING_DIMS;
    const data = inputs.map((input, index) => {
        const vec = embeddingVector(typeof input === 'string' ? input : JSON.stringify(input), dims);
        return {object: 'embedding', index, embedding: asBase64 ? base64Floats(vec) : vec};
    });
    const tokens = inputs.reduce((n, i) => n + countTokens(typeof i === 'string' ? i : ''), 0);
    return jsonAnswer(200, {
        object: 'list', data, model: call.model,
        usage: {prompt_tokens: tokens, total_tokens: tokens},
    }, call.openaiHeaders);
}

function modelList() {
    return jsonAnswer(200, {
        object: 'list',
        data: MODELS.map((id) => ({id, object: 'model', created: 1700000000, owned_by: 'mock'})),
    });
}

/* Anthropic content: a text block, plus a tool_use block when tools are given. */
function messageOutcome(call) {
    const blocks = [{type: 'text', text: call.text}];
    const tool = firstTool(call.body.tools);
    if (tool)
        blocks.push({type: 'tool_use', id: `toolu_mock${call.seq}`, name: tool.name,
            input: toolArguments(tool.schema, call.question, call.seq)});
    const outputTokens = blocks.reduce(
        (n, b) => n + countTokens(b.type === 'text' ? b.text : JSON.stringify(b.input)), 0);
    return {blocks, stop: tool ? 'tool_use' : 'end_turn', outputTokens};
}

/* Anthropic counts cache reads and writes apart from input_tokens; writes by how long they are kept. */
function anthropicUsage(call, outputTokens) {
    const write = call.controls.cacheWrite, hour = Math.min(call.controls.cacheWrite1h, write);
    return {
        input_tokens: call.promptTokens, cache_creation_input_tokens: write,
        cache_read_input_tokens: call.controls.cacheRead,
        cache_creation: {ephemeral_5m_input_tokens: write - hour, ephemeral_1h_input_tokens: hour},
        output_tokens: outputTokens, service_tier: 'standard',
    };
}

function message(call) {
    const out = messageOutcome(call);
    return jsonAnswer(200, {
        id: call.msgId, type: 'message', role: 'assistant', model: call.model,
        content: out.blocks, stop_reason: out.stop, stop_sequence: null,
        usage: anthropicUsage(call, completionCount(call, out.outputTokens)),
    }, call.anthropicHeaders);
}

/* The events of one content block: start, deltas (text or JSON pieces), stop. */
function blockEvents(block, index, controls) {
    const ev = (type, fields) => sseEvent(JSON.stringify({type, index, ...fields}), type);
    const events = [];
    if (block.type === 'text') {
        events.push(ev('content_block_start', {content_block: {type: 'text', text: ''}}));
        for (const piece of splitPieces(block.text, pieceCount(block.text, controls)))
            events.push(ev('content_block_delta', {delta: {type: 'text_delta', text: piece}}));
    } else {
        const json = JSON.stringify(block.input);
        events.push(ev('content_block_start',
            {content_block: {type: 'tool_use', id: block.id, name: block.name, input: {}}}));
        for (const piece of ['', ...splitPieces(json, pieceCount(json, controls))])
            events.push(ev('content_block_delta', {delta: {type: 'input_json_delta', partial_json: piece}}));
    }
    events.push(ev('content_block_stop', {}));
    return events;
}

function messageStream(call) {
    const out = messageOutcome(call);
    const ev = (type, fields) => sseEvent(JSON.stringify({type, ...fields}), type);
    const events = [ev('message_start', {
        message: {
            id: call.msgId, type: 'message', role: 'assistant', model: call.model, content: [],
            stop_reason: null, stop_sequence: null, usage: anthropicUsage(call, 1),
        },
    })];
    out.blocks.forEach((block, i) => {
        const evs = blockEvents(block, i, call.controls);
        events.push(...(i === 0 ? [evs[0], ev('ping', {}), ...evs.slice(1)] : evs));
    });
    events.push(ev('message_delta', {
        delta: {stop_reason: out.stop, stop_sequence: null},
        usage: {output_tokens: completionCount(call, out.outputTokens)},
    }));
    events.push(ev('message_stop', {}));
    return sseAnswer(events, call.anthropicHeaders);
}

/* ------------------------------------------------------------------------ */
/* Responses API                                                             */

/* As OpenAI's chat usage: cached input tokens within input_tokens, reasoning within output_tokens. */
function responsesUsage(call, outputTokens, reasoningTokens) {
    const cached = call.controls.cacheRead;
    outputTokens = completionCount(call, outputTokens);
    return {
        input_tokens: call.promptTokens + cached, input_tokens_details: {cached_tokens: cached},
        output_tokens: outputTokens, output_tokens_details: {reasoning_tokens: reasoningTokens},
        total_tokens: call.promptTokens + cached + outputTokens,
    };
}

/*
 * The output items of a response: a reasoning item when "reasoning" is
 * asked for (with a summary when reasoning.summary is set), then a call to
 * the first function tool, or an assistant message.
 */
function responsesOutput(call) {
    const body = call.body;
    const items = [];
    let reasoningTokens = 0;
    if (body.reasoning && typeof body.reasoning === 'object') {
        const summary = body.reasoning.summary ? [{type: 'summary_text',
            text: `mock reasoning #${call.seq}: the question is short`}] : [];
        items.push({id: `rs_mock${call.seq}`, type: 'reasoning', summary});
        reasoningTokens = 8;
    }
    const tool = firstTool(body.tools);
    let outputTokens;
    if (tool) {
        const args = JSON.stringify(toolArguments(tool.schema, call.question, call.seq));
        items.push({id: `fc_mock${call.seq}`, type: 'function_call', status: 'completed',
            arguments: args, call_id: `call_mock${call.seq}`, name: tool.name});
        outputTokens = countTokens(args);
    } else {
        items.push({id: `msg_mock${call.seq}`, type: 'message', status: 'completed', role: 'assistant',
            content: [{type: 'output_text', annotations: [], logprobs: [], text: call.text}]});
        outputTokens = countTokens(call.text);
    }
    return {items, usage: responsesUsage(call, outputTokens + reasoningTokens, reasoningTokens)};
}

/* The response object, echoing the request's settings as the API does. */
function responseObject(call, status, output, usage) {
    const b = call.body;
    const or = (v, d) => (v === undefined ? d : v);
    return {
        id: call.respId, object: 'response', created_at: call.created, status,
        background: or(b.background, false), error: null, incomplete_details: null,
        instructions: or(b.instructions, null), max_output_tokens: or(b.max_output_tokens, null),
        model: call.model, output, parallel_tool_calls: or(b.parallel_tool_calls, true),
        previous_response_id: or(b.previous_response_id, null),
        reasoning: {effort: (b.reasoning && b.reasoning.effort) || null,
            summary: (b.reasoning && b.reasoning.summary) || null},
        service_tier: 'default', store: or(b.store, true), temperature: or(b.temperature, 1),
        text: or(b.text, {format: {type: 'text'}}), tool_choice: or(b.tool_choice, 'auto'),
        tools: or(b.tools, []), top_p: or(b.top_p, 1), truncation: or(b.truncation, 'disabled'),
        usage, user: or(b.user, null), metadata: or(b.metadata, {}),
    };
}

/* background: true answers at once with a queued response (nothing generated yet). */
function response(call) {
    if (call.body.background === true)
        return jsonAnswer(200, responseObject(call, 'queued', [], null), call.openaiHeaders);
    const out = responsesOutput(call);
    return jsonAnswer(200, responseObject(call, 'completed', out.items, out.usage), call.openaiHeaders);
}

/* The events of one output item: added (in progress), its streamed parts, done. */
function responseItemEvents(item, index, ev, controls) {
    const events = [];
    const at = {item_id: item.id, output_index: index};
    const pieces = (text) => splitPieces(text, pieceCount(text, controls));
    if (item.type === 'message') {
        events.push(ev('response.output_item.added', {output_index: index,
            item: {...item, status: 'in_progress', content: []}}));
        item.content.forEach((part, ci) => {
            const p = {...at, content_index: ci};
            events.push(ev('response.content_part.added', {...p, part: {...part, text: ''}}));
            for (const piece of pieces(part.text))
                events.push(ev('response.output_text.delta', {...p, delta: piece, logprobs: [],
                    obfuscation: 'mock'}));
            events.push(ev('response.output_text.done', {...p, text: part.text, logprobs: []}));
            events.push(ev('response.content_part.done', {...p, part}));
        });
    } else if (item.type === 'function_call') {
        events.push(ev('response.output_item.added', {output_index: index,
            item: {...item, status: 'in_progress', arguments: ''}}));
        for (const piece of pieces(item.arguments))
            events.push(ev('response.function_call_arguments.delta', {...at, delta: piece,
                obfuscation: 'mock'}));
        events.push(ev('response.function_call_arguments.done', {...at, arguments: item.arguments}));
    } else {
        events.push(ev('response.output_item.added', {output_index: index, item: {...item, summary: []}}));
        (item.summary || []).forEach((part, si) => {
            const p = {...at, summary_index: si};
            events.push(ev('response.reasoning_summary_part.added', {...p, part: {...part, text: ''}}));
            for (const piece of pieces(part.text))
                events.push(ev('response.reasoning_summary_text.delta', {...p, delta: piece}));
            events.push(ev('response.reasoning_summary_text.done', {...p, text: part.text}));
            events.push(ev('response.reasoning_summary_part.done', {...p, part}));
        });
    }
    events.push(ev('response.output_item.done', {output_index: index, item}));
    return events;
}

/* created, in_progress, the items, completed: each event named by its type and numbered. */
function responseStream(call) {
    let seq = 0;
    const ev = (type, fields) => sseEvent(JSON.stringify({type, sequence_number: seq++, ...fields}), type);
    const out = responsesOutput(call);
    const start = responseObject(call, 'in_progress', [], null);
    const events = [ev('response.created', {response: start}), ev('response.in_progress', {response: start})];
    out.items.forEach((item, i) => events.push(...responseItemEvents(item, i, ev, call.controls)));
    events.push(ev('response.completed', {response: responseObject(call, 'completed', out.items, out.usage)}));
    return sseAnswer(events, call.openaiHeaders);
}

/* Endpoint table: path -> error dialect and answer builders. */
const ENDPOINTS = {
    '/v1/chat/completions': {dialect: 'openai', json: chatCompletion, stream: chatStream},
    '/v1/completions': {dialect: 'openai', json: textCompletion, stream: textCompletionStream},
    '/v1/embeddings': {dialect: 'openai', json: embeddings, stream: null},
    '/v1/messages': {dialect: 'anthropic', json: message, stream: messageStream},
    '/v1/responses': {dialect: 'openai', json: response, stream: responseStream},
};

/*
 * The bookkeeping members the APIs check although they do not change the
 * answer (the proxy leaves them out of its cache key): a value the real API
 * refuses gets its 400, in its words and shape, so a test can show that such
 * a refusal reaches only the request that carried it. OpenAI: service_tier
 * one of its tiers, metadata at most 16 string values, user a string, store
 * a boolean. Anthropic: service_tier "auto" or "standard_only", metadata
 * with user_id only. Returns the error answer, or null for a valid body.
 */
const OPENAI_TIERS = ['auto', 'default', 'flex', 'scale', 'priority'];
const ANTHROPIC_TIERS = ['auto', 'standard_only'];

function jsType(v) {
    return v === null ? 'null' : Array.isArray(v) ? 'array'
        : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;
}

function openaiInvalid(param, code, message) {
    return jsonAnswer(400, {error: {message, type: 'invalid_request_error', param, code}});
}

function openaiRefusal(body) {
    const tier = body.service_tier;
    if (tier !== undefined && tier !== null && !OPENAI_TIERS.includes(tier))
        return openaiInvalid('service_tier', 'invalid_value', `Invalid value: '${tier}'. Supported ` +
            `values are: ${OPENAI_TIERS.slice(0, -1).map((t) => `'${t}'`).join(', ')}, and 'priority'.`);
    for (const [name, want] of [['user', 'string'], ['store', 'boolean']]) {
        const v = body[name];
        if (v !== undefined && v !== null && typeof v !== want)
            return openaiInvalid(name, 'invalid_type', `Invalid type for '${name}': expected a ` +
                `${want}, but got ${jsType(v) === 'integer' ? 'an integer' : 'a ' + jsType(v)} instead.`);
    }
    const md = body.metadata;
    if (md !== undefined && md !== null) {
        const n = typeof md === 'object' && !Array.isArray(md) ? Object.keys(md).length : -1;
        if (n > 16)
            return openaiInvalid('metadata', 'object_above_max_properties', "Invalid 'metadata': too " +
                `many properties. Expected an object with at most 16 properties, but got an object ` +
                `with ${n} properties instead.`);
        if (n < 0 || Object.values(md).some((v) => typeof v !== 'string'))
            return openaiInvalid('metadata', 'invalid_type', "Invalid type for 'metadata': expected " +
                'an object with string values.');
    }
    return null;
}

function anthropicRefusal(body) {
    const tier = body.service_tier;
    if (tier !== undefined && !ANTHROPIC_TIERS.includes(tier))
        return anthropicError(400, "service_tier: Input should be 'auto' or 'standard_only'");
    const md = body.metadata;
    if (md !== undefined && (md === null || typeof md !== 'object' || Array.isArray(md)))
        return anthropicError(400, 'metadata: Input should be a valid dictionary');
    const extra = md === undefined ? undefined : Object.keys(md).find((k) => k !== 'user_id');
    if (extra !== undefined)
        return anthropicError(400, `metadata.${extra}: Extra inputs are not permitted`);
    return null;
}

function bookkeepingRefusal(path, body) {
    const ep = ENDPOINTS[path];
    if (!ep)
        return null;
    return ep.dialect === 'anthropic' ? anthropicRefusal(body) : openaiRefusal(body);
}

function errorAnswer(path, status, message) {
    const ep = ENDPOINTS[path];
    return ep && ep.dialect === 'anthropic' ? anthropicError(status, message)
        : openaiError(status, message);
}

module.exports = {
    ENDPOINTS, BIG_PIECE, errorAnswer, openaiError, modelList, bookkeepingRefusal,
    lastUserText, promptText, countTokens, answerText, echoText, meaningText, embeddingVector,
};
