'use strict';
/*
 * A cached answer says exactly what the upstream said, in either mode: an
 * answer first fetched as JSON and served to a stream client, and a stream
 * assembled into the JSON answer served to a JSON client, carry the same
 * text, tool calls (ids, names, arguments byte for byte, several per turn,
 * across n choices), finish and stop reasons, refusals, logprobs, reasoning,
 * Anthropic thinking with its signature, redacted thinking, citations and
 * server tool blocks, Responses reasoning items and calls; members beyond
 * the APIs' own survive too. A replayed stream carries usage when its client
 * asks for it, and a hit saves the tokens the stored answer used, once. The
 * upstream's exact bytes come from x-mock-body / x-mock-sse; what the client
 * gets is read as the SDKs' stream helpers read it (deltas accumulated:
 * strings concatenated, objects merged, list entries merged by their "index").
 */
const assert = require('node:assert/strict');
const http = require('node:http');
const h = require('./lib');
const {rawReply} = require('./lib/redis');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const COMPLETIONS = '/v1/completions';
const MESSAGES = '/v1/messages';
const RESPONSES = '/v1/responses';

const b64 = (s) => Buffer.from(s).toString('base64');
/* JSON in ASCII (a header's value): every other character as its \\u escape. */
const asciiJson = (v) => JSON.stringify(v).replace(/[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
const sse = (events) => events.map((e) => (typeof e === 'string' ? `data: ${e}\n\n`
    : `${e.event ? `event: ${e.event}\n` : ''}data: ${JSON.stringify(e.data)}\n\n`)).join('');

/* The openai Python SDK's accumulate_delta, numbers left as the last value. */
function accumulate(acc, delta) {
    for (const [k, v] of Object.entries(delta)) {
        const have = acc[k];
        if (have === undefined || have === null || k === 'index' || k === 'type') {
            acc[k] = v === null || typeof v !== 'object' ? v : structuredClone(v);
        } else if (typeof have === 'string' && typeof v === 'string') {
            acc[k] = have + v;
        } else if (Array.isArray(have) && Array.isArray(v)) {
            if (v.every((x) => x && typeof x === 'object' && Number.isInteger(x.index))) {
                for (const entry of v) {
                    if (have[entry.index] === undefined)
                        have[entry.index] = structuredClone(entry);
                    else
                        accumulate(have[entry.index], entry);
                }
            } else {
                have.push(...structuredClone(v));
            }
        } else if (have && typeof have === 'object' && v && typeof v === 'object') {
            accumulate(have, v);
        } else if (v !== null) {
            acc[k] = v;
        }
    }
    return acc;
}

/* A chat or completions stream as its choices (by index) and the chunks' top members. */
function assembleOpenAI(text) {
    const events = h.parseSSE(text);
    const out = {choices: [], usage: null, done: false, top: {}, chunks: []};
    for (const ev of events) {
        if (ev.data === '[DONE]') {
            out.done = true;
            continue;
        }
        const chunk = JSON.parse(ev.data);
        out.chunks.push(chunk);
        if (chunk.usage)
            out.usage = chunk.usage;
        for (const [k, v] of Object.entries(chunk))
            if (!['choices', 'usage', 'object'].includes(k))
                out.top[k] = v;
        for (const ch of chunk.choices) {
            const c = out.choices[ch.index] || (out.choices[ch.index] = {message: {}, text: '',
                finish_reason: null, logprobs: undefined, extra: {}});
            /* Other members of a choice (vLLM's stop_reason, Azure's filter results): the last. */
            for (const [k, v] of Object.entries(ch))
                if (!['index', 'delta', 'text', 'logprobs', 'finish_reason'].includes(k) && (v !== null || !(k in c.extra)))
                    c.extra[k] = v;
            if (ch.delta)
                accumulate(c.message, ch.delta);
            if (typeof ch.text === 'string')
                c.text += ch.text;
            if (ch.finish_reason)
                c.finish_reason = ch.finish_reason;
            if (ch.logprobs !== undefined) {
                if (c.logprobs === undefined || c.logprobs === null)
                    c.logprobs = ch.logprobs === null ? null : structuredClone(ch.logprobs);
                else if (ch.logprobs)
                    accumulate(c.logprobs, ch.logprobs);
            }
        }
    }
    for (const c of out.choices)
        for (const tc of (c && c.message.tool_calls) || [])
            delete tc.index;
    return out;
}

/* The members of a JSON chat message a stream carries (null ones are absent from deltas). */
function streamedMessage(m) {
    const out = {};
    for (const [k, v] of Object.entries(m))
        if (v !== null && !(k === 'content' && v === ''))
            out[k] = v;
    return out;
}

async function post(path, body, headers) {
    const res = await env.proxy.post(path, body, headers);
    assert.equal(res.status, 200, res.text.slice(0, 400));
    return res;
}

/* JSON answer first (exact upstream bytes), then the same request as a stream: a HIT. */
async function jsonThenStream(path, body, raw, streamExtra = {}) {
    const j = await post(path, body, {'x-mock-body': raw});
    h.assertFromUpstream(j, env.mock);
    const s = await post(path, {...body, stream: true, ...streamExtra});
    h.assertHit(s);
    assert.match(String(s.headers['content-type']), /^text\/event-stream/);
    return {json: JSON.parse(raw), stream: s.text};
}

/* A stream first (exact upstream bytes), then the same request as JSON and as a stream again. */
async function streamThenJson(path, body, raw, streamExtra = {stream: true}) {
    const s = await post(path, {...body, ...streamExtra}, {'x-mock-sse': b64(raw)});
    h.assertFromUpstream(s, env.mock);
    const j = await post(path, body);
    h.assertHit(j);
    const again = await post(path, {...body, ...streamExtra});
    h.assertHit(again);
    return {miss: s.text, json: j.json, again: again.text};
}

/* ------------------------------------------------------------------------ */
/* OpenAI chat                                                               */

const LOGPROBS = {content: [{token: 'Hi', logprob: -0.25, bytes: [72, 105], top_logprobs: []},
    {token: ' \u{1F600}', logprob: -1.5e-7, bytes: [32, 240, 159, 152, 128], top_logprobs: []}],
refusal: null};

h.test('chat JSON served as a stream: n=2, reasoning, parallel tool calls, a refusal, logprobs', async () => {
    const answer = {id: 'chatcmpl-fid1', object: 'chat.completion', created: 1700000000, model: 'gpt-x',
        choices: [
            {index: 0, message: {role: 'assistant', content: 'Checking \u{1F600} both \ud83c\udf0d cities.',
                reasoning_content: 'The user wants two lookups; I call both at once.',
                tool_calls: [
                    {id: 'call_a', type: 'function', function: {name: 'get_weather', arguments: '{"city": "Paris", "unit":"c"}'}},
                    {id: 'call_b', type: 'function', function: {name: 'get_time', arguments: '{"tz":"Europe/Rome","list":[1,2.50,"\\u00e9"]}'}},
                ], refusal: null, annotations: []},
            logprobs: LOGPROBS, finish_reason: 'tool_calls'},
            {index: 1, message: {role: 'assistant', content: null, refusal: 'I can\u2019t help with that.'},
                logprobs: null, finish_reason: 'stop'},
        ],
        usage: {prompt_tokens: 11, completion_tokens: 40, total_tokens: 51},
        system_fingerprint: 'fp_x'};
    const body = h.chatBody(h.uniq('fidelity chat json'), {n: 2, logprobs: true});
    const {json, stream} = await jsonThenStream(CHAT, body, asciiJson(answer), h.STREAM_WITH_USAGE);
    const a = assembleOpenAI(stream);
    assert.ok(a.done);
    assert.deepEqual(a.usage, json.usage);
    assert.equal(a.choices.length, 2);
    for (const ch of json.choices) {
        const got = a.choices[ch.index];
        assert.deepEqual(streamedMessage(got.message), streamedMessage(ch.message), `choice ${ch.index} message`);
        assert.equal(got.finish_reason, ch.finish_reason);
        assert.deepEqual(got.logprobs, ch.logprobs, `choice ${ch.index} logprobs`);
    }
    assert.equal(a.top.id, 'chatcmpl-fid1');
    assert.equal(a.top.system_fingerprint, 'fp_x');
});

function chatChunk(choices, extra = {}) {
    return JSON.stringify({id: 'chatcmpl-fid2', object: 'chat.completion.chunk', created: 1700000001,
        model: 'gpt-x', choices, ...extra});
}

h.test('chat stream served as JSON: deltas merged by index, out of order, many pieces', async () => {
    const raw = sse([
        chatChunk([{index: 1, delta: {role: 'assistant', content: ''}, logprobs: null, finish_reason: null}]),
        chatChunk([{index: 0, delta: {role: 'assistant', content: null, reasoning_content: 'Two '}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {reasoning_content: 'calls.'}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, id: 'call_1', type: 'function',
            function: {name: 'get_weather', arguments: ''}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, function: {arguments: '{"ci'}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 1, id: 'call_2', type: 'function',
            function: {name: 'get_time', arguments: '{"tz": '}}]}, finish_reason: null}]),
        chatChunk([{index: 1, delta: {content: 'Hello \u{1F44B}'}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, function: {arguments: 'ty":"Paris"}'}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 1, function: {arguments: '"UTC"}'}}]}, finish_reason: null}]),
        chatChunk([{index: 1, delta: {content: ' there, w\u00f6rld'}, finish_reason: null}]),
        chatChunk([{index: 1, delta: {}, finish_reason: 'stop'}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'tool_calls'}]),
        chatChunk([], {usage: {prompt_tokens: 9, completion_tokens: 30, total_tokens: 39}}),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity chat stream'), {n: 2});
    const {miss, json, again} = await streamThenJson(CHAT, body, raw, h.STREAM_WITH_USAGE);
    const m = assembleOpenAI(miss);
    assert.deepEqual(json.choices.map((c) => c.index), [0, 1], 'choices in index order');
    for (const ch of json.choices) {
        assert.deepEqual(streamedMessage(ch.message), streamedMessage(m.choices[ch.index].message),
            `choice ${ch.index} as the stream said`);
        assert.equal(ch.finish_reason, m.choices[ch.index].finish_reason);
    }
    assert.equal(json.choices[0].message.tool_calls[0].function.arguments, '{"city":"Paris"}');
    assert.equal(json.choices[0].message.tool_calls[1].function.arguments, '{"tz": "UTC"}');
    assert.deepEqual(json.usage, m.usage);
    assert.deepEqual(h.parseSSE(again), h.parseSSE(miss), 'the stream replayed event for event');
});

h.test('chat stream served as JSON: parallel tool calls in two choices, interleaved', async () => {
    const call = (ci, ti, d) => chatChunk([{index: ci, delta: {tool_calls: [{index: ti, ...d}]}, finish_reason: null}]);
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: null}, finish_reason: null},
            {index: 1, delta: {role: 'assistant', content: null}, finish_reason: null}]),
        call(1, 0, {id: 'call_1a', type: 'function', function: {name: 'f', arguments: ''}}),
        call(0, 0, {id: 'call_0a', type: 'function', function: {name: 'g', arguments: '{"a":'}}),
        call(1, 1, {id: 'call_1b', type: 'function', function: {name: 'h', arguments: '[1,'}}),
        call(1, 0, {function: {arguments: '{"x":"\u00e9\ud83d\ude00"}'}}),
        call(0, 0, {function: {arguments: '1}'}}),
        call(1, 1, {function: {arguments: '2]'}}),
        chatChunk([{index: 1, delta: {}, finish_reason: 'tool_calls'}, {index: 0, delta: {}, finish_reason: 'tool_calls'}]),
        chatChunk([], {usage: {prompt_tokens: 5, completion_tokens: 4, total_tokens: 9}}),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity parallel choices'), {n: 2});
    const {miss, json} = await streamThenJson(CHAT, body, raw);
    const m = assembleOpenAI(miss);
    assert.deepEqual(json.choices.map((c) => c.message.tool_calls), m.choices.map((c) => c.message.tool_calls));
    assert.deepEqual(json.choices[1].message.tool_calls.map((t) => [t.id, t.function.name, t.function.arguments]),
        [['call_1a', 'f', '{"x":"\u00e9\u{1F600}"}'], ['call_1b', 'h', '[1,2]']]);
});

/* OpenAI's custom tools (type "custom"): the call's name and input are under "custom". */
h.test('chat JSON with a custom tool call served as a stream keeps its name and input', async () => {
    const answer = {id: 'chatcmpl-fid3', object: 'chat.completion', created: 1700000002, model: 'gpt-x',
        choices: [{index: 0, message: {role: 'assistant', content: null, refusal: null,
            tool_calls: [{id: 'call_c', type: 'custom', custom: {name: 'run_sql', input: 'SELECT 1;\nSELECT "x";'}},
                {id: 'call_f', type: 'function', function: {name: 'get_weather', arguments: '{}'}}]},
        logprobs: null, finish_reason: 'tool_calls'}],
        usage: {prompt_tokens: 5, completion_tokens: 12, total_tokens: 17}};
    const body = h.chatBody(h.uniq('fidelity custom tool json'));
    const {json, stream} = await jsonThenStream(CHAT, body, asciiJson(answer));
    const a = assembleOpenAI(stream);
    assert.deepEqual(a.choices[0].message.tool_calls, json.choices[0].message.tool_calls);
});

h.test('chat stream with a custom tool call served as JSON keeps its name and input', async () => {
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: null}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, id: 'call_c', type: 'custom',
            custom: {name: 'run_sql', input: ''}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, custom: {input: 'SELECT '}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {tool_calls: [{index: 0, custom: {input: '1;'}}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'tool_calls'}]),
        chatChunk([], {usage: {prompt_tokens: 5, completion_tokens: 12, total_tokens: 17}}),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity custom tool stream'));
    const {json} = await streamThenJson(CHAT, body, raw, h.STREAM_WITH_USAGE);
    assert.deepEqual(json.choices[0].message.tool_calls,
        [{id: 'call_c', type: 'custom', custom: {name: 'run_sql', input: 'SELECT 1;'}}]);
});

/* Members of a choice beyond OpenAI's: vLLM's stop_reason (the stop string or token), Azure's filter results. */
const CHOICE_EXTRA = {stop_reason: '</answer>', content_filter_results: {hate: {filtered: false, severity: 'safe'}}};

/* vLLM's token_ids (return_token_ids): each chunk carries those of its piece, a reader concatenates them. */
function tokenIds(text) {
    return h.parseSSE(text).filter((e) => e.data !== '[DONE]').flatMap((e) => JSON.parse(e.data).choices)
        .flatMap((c) => c.token_ids || []);
}

h.test('chat JSON served as a stream keeps a choice\'s other members (vLLM stop_reason)', async () => {
    const answer = {id: 'chatcmpl-fid4', object: 'chat.completion', created: 1700000005, model: 'llama',
        choices: [{index: 0, message: {role: 'assistant', content: 'Done.', tool_calls: []},
            logprobs: null, finish_reason: 'stop', ...CHOICE_EXTRA, token_ids: [7, 8]}],
        usage: {prompt_tokens: 5, completion_tokens: 2, total_tokens: 7}};
    const body = h.chatBody(h.uniq('fidelity choice extras json'));
    const {stream} = await jsonThenStream(CHAT, body, asciiJson(answer));
    assert.deepEqual(assembleOpenAI(stream).choices[0].extra, {...CHOICE_EXTRA, token_ids: [7, 8]});
    assert.deepEqual(tokenIds(stream), [7, 8], 'the token ids once');
});

h.test('chat and completions streams served as JSON keep a choice\'s other members', async () => {
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: 'Do'}, logprobs: null, finish_reason: null,
            stop_reason: null, content_filter_results: CHOICE_EXTRA.content_filter_results, token_ids: [7]}]),
        chatChunk([{index: 0, delta: {content: 'ne.'}, logprobs: null, finish_reason: 'stop', ...CHOICE_EXTRA,
            token_ids: [8, 9]}]),
        chatChunk([], {usage: {prompt_tokens: 5, completion_tokens: 4, total_tokens: 9}}),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity choice extras stream'));
    const {json} = await streamThenJson(CHAT, body, raw);
    const {index, message, logprobs, finish_reason: fr, ...extra} = json.choices[0];
    assert.equal(message.content, 'Done.');
    assert.deepEqual(extra, {...CHOICE_EXTRA, token_ids: [7, 8, 9]}, 'token ids concatenated, the rest the last');
    const craw = sse([
        JSON.stringify({id: 'cmpl-x', object: 'text_completion', created: 1, model: 'llama',
            choices: [{index: 0, text: 'Do', logprobs: null, finish_reason: null, stop_reason: null}]}),
        JSON.stringify({id: 'cmpl-x', object: 'text_completion', created: 1, model: 'llama',
            choices: [{index: 0, text: 'ne.', logprobs: null, finish_reason: 'stop', stop_reason: 128009}]}),
        JSON.stringify({id: 'cmpl-x', object: 'text_completion', created: 1, model: 'llama', choices: [],
            usage: {prompt_tokens: 2, completion_tokens: 2, total_tokens: 4}}),
        '[DONE]',
    ]);
    const cbody = h.completionBody(h.uniq('fidelity choice extras completions'));
    const c = await streamThenJson(COMPLETIONS, cbody, craw);
    assert.equal(c.json.choices[0].text, 'Done.');
    assert.equal(c.json.choices[0].stop_reason, 128009);
    assert.equal(assembleOpenAI(c.again).choices[0].extra.stop_reason, 128009, 'the stream replayed');
});

/* Gemini's OpenAI-compatible API: a tool call's thought signature, which the next turn must send back. */
h.test('a tool call\'s other members (Gemini\'s extra_content thought signature) survive both ways', async () => {
    const extra = {google: {thought_signature: 'CiQB0e2Kb+sig=='}};
    const call = {id: 'call_g', type: 'function', function: {name: 'get_weather', arguments: '{"city":"Oslo"}'},
        extra_content: extra};
    const answer = {id: 'chatcmpl-fid5', object: 'chat.completion', created: 1700000007, model: 'gemini-3-pro',
        choices: [{index: 0, message: {role: 'assistant', content: null, tool_calls: [call]}, finish_reason: 'tool_calls'}],
        usage: {prompt_tokens: 5, completion_tokens: 3, total_tokens: 8}};
    const {stream} = await jsonThenStream(CHAT, h.chatBody(h.uniq('fidelity gemini json')), asciiJson(answer));
    assert.deepEqual(assembleOpenAI(stream).choices[0].message.tool_calls, [call]);
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', tool_calls: [{index: 0, ...call}]}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'tool_calls'}]),
        chatChunk([], {usage: {prompt_tokens: 5, completion_tokens: 4, total_tokens: 9}}),
        '[DONE]',
    ]);
    const {json} = await streamThenJson(CHAT, h.chatBody(h.uniq('fidelity gemini stream')), raw);
    assert.deepEqual(json.choices[0].message.tool_calls, [call]);
});

/* ------------------------------------------------------------------------ */
/* Legacy completions                                                        */

h.test('completions JSON served as a stream: n=2 with logprobs, in order', async () => {
    const lp = (toks) => ({tokens: toks, token_logprobs: toks.map(() => -0.5),
        top_logprobs: toks.map((t) => ({[t]: -0.5})), text_offset: toks.map((_, i) => i)});
    const answer = {id: 'cmpl-fid', object: 'text_completion', created: 1700000003, model: 'gpt-3.5-turbo-instruct',
        choices: [{text: ' one \u{1F600}', index: 0, logprobs: lp([' one', ' \u{1F600}']), finish_reason: 'length'},
            {text: ' two', index: 1, logprobs: lp([' two']), finish_reason: 'stop'}],
        usage: {prompt_tokens: 3, completion_tokens: 3, total_tokens: 6}};
    const body = h.completionBody(h.uniq('fidelity completions'), {n: 2, logprobs: 1});
    const {json, stream} = await jsonThenStream(COMPLETIONS, body, asciiJson(answer), h.STREAM_WITH_USAGE);
    const a = assembleOpenAI(stream);
    assert.deepEqual(a.usage, json.usage);
    for (const ch of json.choices) {
        assert.equal(a.choices[ch.index].text, ch.text);
        assert.equal(a.choices[ch.index].finish_reason, ch.finish_reason);
        assert.deepEqual(a.choices[ch.index].logprobs, ch.logprobs);
    }
});

/* ------------------------------------------------------------------------ */
/* Anthropic                                                                 */

/* As the @anthropic-ai/sdk MessageStream accumulates events into its final message. */
function assembleAnthropic(text) {
    let msg = null;
    const partial = [];
    for (const ev of h.parseSSE(text)) {
        const d = JSON.parse(ev.data);
        if (d.type === 'message_start') {
            msg = structuredClone(d.message);
        } else if (d.type === 'content_block_start') {
            msg.content[d.index] = structuredClone(d.content_block);
            partial[d.index] = '';
        } else if (d.type === 'content_block_delta') {
            const b = msg.content[d.index];
            const t = d.delta.type;
            if (t === 'text_delta')
                b.text += d.delta.text;
            else if (t === 'thinking_delta')
                b.thinking += d.delta.thinking;
            else if (t === 'signature_delta')
                b.signature = d.delta.signature;
            else if (t === 'citations_delta')
                b.citations = [...(b.citations || []), d.delta.citation];
            else if (t === 'input_json_delta')
                partial[d.index] += d.delta.partial_json;
            else if (t === 'compaction_delta') {
                b.content = d.delta.content;
                if ('encrypted_content' in d.delta)
                    b.encrypted_content = d.delta.encrypted_content;
            }
        } else if (d.type === 'content_block_stop') {
            if (partial[d.index])
                msg.content[d.index].input = JSON.parse(partial[d.index]);
        } else if (d.type === 'message_delta') {
            /* As the SDK: these three always, the container and context management when not null. */
            msg.stop_reason = d.delta.stop_reason;
            msg.stop_sequence = d.delta.stop_sequence;
            msg.stop_details = d.delta.stop_details;
            if (d.delta.container != null)
                msg.container = d.delta.container;
            if (d.context_management != null)
                msg.context_management = d.context_management;
            for (const [k, v] of Object.entries(d.usage || {}))
                if (v !== null)
                    msg.usage[k] = v;
        }
    }
    return msg;
}

const AN_CONTENT = [
    {type: 'thinking', thinking: 'Let me search for this \u{1F50D} first.', signature: 'EqQBCkYIBhgCIkA0c2ln/+=='},
    {type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP'},
    {type: 'server_tool_use', id: 'srvtoolu_01', name: 'web_search', input: {query: 'weather Paris today'}},
    {type: 'web_search_tool_result', tool_use_id: 'srvtoolu_01', content: [
        {type: 'web_search_result', url: 'https://example.com/w', title: 'Weather', encrypted_content: 'Eq0x', page_age: null}]},
    {type: 'text', text: 'It is sunny \u2600\ufe0f in Paris.', citations: [
        {type: 'web_search_result_location', url: 'https://example.com/w', title: 'Weather',
            encrypted_index: 'EpMB', cited_text: 'Sunny, 24 \u00b0C'}]},
    {type: 'tool_use', id: 'toolu_02', name: 'get_time', input: {tz: 'Europe/Paris', list: [1, 'a\u00e9', null, true]}},
];

h.test('messages JSON served as a stream: thinking, redacted thinking, server tools, citations', async () => {
    const answer = {id: 'msg_fid1', type: 'message', role: 'assistant', model: 'claude-x', content: AN_CONTENT,
        stop_reason: 'tool_use', stop_sequence: null, stop_details: null,
        usage: {input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 4, output_tokens: 90,
            server_tool_use: {web_search_requests: 1}}};
    const body = h.messagesBody(h.uniq('fidelity messages json'));
    const {json, stream} = await jsonThenStream(MESSAGES, body, asciiJson(answer));
    const m = assembleAnthropic(stream);
    assert.deepEqual(m.content, json.content);
    assert.equal(m.stop_reason, 'tool_use');
    assert.equal(m.stop_sequence, null);
    assert.equal(m.stop_details, null);
    assert.deepEqual(m.usage, json.usage);
    assert.equal(m.id, json.id);
});

/* The members message_delta carries besides the stop reason: refusal details, container, context edits. */
const STOP_DETAILS = {type: 'refusal', category: 'cyber', explanation: 'The request could enable cyber harm.'};
const CONTAINER = {id: 'container_011CPR5CNjB747bTd36fQLFk', expires_at: '2026-12-06T05:00:00Z'};
const CONTEXT_MANAGEMENT = {applied_edits: [{type: 'clear_tool_uses_20250919', cleared_tool_uses: 2,
    cleared_input_tokens: 500}]};

h.test('messages JSON served as a stream keeps stop_details, container and context_management', async () => {
    const answer = {id: 'msg_fid3', type: 'message', role: 'assistant', model: 'claude-x',
        content: [{type: 'text', text: 'I can\u2019t help with that.'}], stop_reason: 'refusal', stop_sequence: null,
        stop_details: STOP_DETAILS, container: CONTAINER, context_management: CONTEXT_MANAGEMENT,
        usage: {input_tokens: 12, output_tokens: 8}};
    const body = h.messagesBody(h.uniq('fidelity messages stop details json'));
    const {json, stream} = await jsonThenStream(MESSAGES, body, asciiJson(answer));
    const m = assembleAnthropic(stream);
    assert.deepEqual(m, json, 'the message an SDK assembles is the JSON answer');
});

function anEvent(data) {
    return {event: data.type, data};
}

h.test('messages stream served as JSON: signature, citations and input JSON deltas merged', async () => {
    const delta = (index, d) => anEvent({type: 'content_block_delta', index, delta: d});
    const stop = (index) => anEvent({type: 'content_block_stop', index});
    const start = (index, b) => anEvent({type: 'content_block_start', index, content_block: b});
    const raw = sse([
        anEvent({type: 'message_start', message: {id: 'msg_fid2', type: 'message', role: 'assistant', model: 'claude-x',
            content: [], stop_reason: null, stop_sequence: null,
            usage: {input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 4, output_tokens: 1}}}),
        start(0, {type: 'thinking', thinking: '', signature: ''}),
        delta(0, {type: 'thinking_delta', thinking: 'Let me search for this '}),
        delta(0, {type: 'thinking_delta', thinking: '\u{1F50D} first.'}),
        delta(0, {type: 'signature_delta', signature: 'EqQBCkYIBhgCIkA0c2ln/+=='}),
        stop(0),
        start(1, {type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP'}),
        stop(1),
        start(2, {type: 'server_tool_use', id: 'srvtoolu_01', name: 'web_search', input: {}}),
        delta(2, {type: 'input_json_delta', partial_json: ''}),
        delta(2, {type: 'input_json_delta', partial_json: '{"query": "weather'}),
        delta(2, {type: 'input_json_delta', partial_json: ' Paris today"}'}),
        stop(2),
        start(3, AN_CONTENT[3]),
        stop(3),
        start(4, {type: 'text', text: '', citations: []}),
        delta(4, {type: 'citations_delta', citation: AN_CONTENT[4].citations[0]}),
        delta(4, {type: 'text_delta', text: 'It is sunny \u2600'}),
        delta(4, {type: 'text_delta', text: '\ufe0f in Paris.'}),
        stop(4),
        start(5, {type: 'tool_use', id: 'toolu_02', name: 'get_time', input: {}}),
        delta(5, {type: 'input_json_delta', partial_json: '{"tz": "Europe/Paris", "list": [1, "a\\u00e9", nu'}),
        delta(5, {type: 'input_json_delta', partial_json: 'll, true]}'}),
        stop(5),
        anEvent({type: 'message_delta', delta: {stop_reason: 'tool_use', stop_sequence: null},
            usage: {output_tokens: 90, server_tool_use: {web_search_requests: 1}}}),
        anEvent({type: 'message_stop'}),
    ]);
    const body = h.messagesBody(h.uniq('fidelity messages stream'));
    const {miss, json, again} = await streamThenJson(MESSAGES, body, raw);
    const m = assembleAnthropic(miss);
    assert.deepEqual(json.content, m.content, 'the JSON answer holds what the stream said');
    assert.deepEqual(json.content, AN_CONTENT);
    assert.equal(json.stop_reason, 'tool_use');
    assert.deepEqual(json.usage, m.usage);
    assert.deepEqual(h.parseSSE(again), h.parseSSE(miss), 'the stream replayed event for event');
});

h.test('messages stream served as JSON keeps stop_details, container and context_management', async () => {
    const raw = sse([
        anEvent({type: 'message_start', message: {id: 'msg_fid4', type: 'message', role: 'assistant', model: 'claude-x',
            content: [], stop_reason: null, stop_sequence: null, stop_details: null, container: null,
            usage: {input_tokens: 12, output_tokens: 1}}}),
        anEvent({type: 'content_block_start', index: 0, content_block: {type: 'text', text: ''}}),
        anEvent({type: 'content_block_delta', index: 0, delta: {type: 'text_delta', text: 'No.'}}),
        anEvent({type: 'content_block_stop', index: 0}),
        anEvent({type: 'message_delta', delta: {stop_reason: 'refusal', stop_sequence: null, stop_details: STOP_DETAILS,
            container: CONTAINER}, context_management: CONTEXT_MANAGEMENT, usage: {output_tokens: 8}}),
        anEvent({type: 'message_stop'}),
    ]);
    const body = h.messagesBody(h.uniq('fidelity messages stop details stream'));
    const {miss, json} = await streamThenJson(MESSAGES, body, raw);
    assert.deepEqual(json, assembleAnthropic(miss), 'the JSON answer is the message the stream made');
    assert.deepEqual(json.context_management, CONTEXT_MANAGEMENT);
});

/* The context compaction beta: the block's summary comes in a compaction_delta, which assigns it. */
h.test('messages stream with a compaction block served as JSON keeps its summary', async () => {
    const raw = sse([
        anEvent({type: 'message_start', message: {id: 'msg_fid6', type: 'message', role: 'assistant', model: 'claude-x',
            content: [], stop_reason: null, stop_sequence: null, usage: {input_tokens: 50, output_tokens: 1}}}),
        anEvent({type: 'content_block_start', index: 0, content_block: {type: 'compaction', content: null}}),
        anEvent({type: 'content_block_delta', index: 0, delta: {type: 'compaction_delta',
            content: 'Summary: the user asked about Paris weather.', encrypted_content: 'EqABCz'}}),
        anEvent({type: 'content_block_stop', index: 0}),
        anEvent({type: 'content_block_start', index: 1, content_block: {type: 'text', text: ''}}),
        anEvent({type: 'content_block_delta', index: 1, delta: {type: 'text_delta', text: 'Sunny.'}}),
        anEvent({type: 'content_block_stop', index: 1}),
        anEvent({type: 'message_delta', delta: {stop_reason: 'end_turn', stop_sequence: null}, usage: {output_tokens: 30}}),
        anEvent({type: 'message_stop'}),
    ]);
    const body = h.messagesBody(h.uniq('fidelity compaction'));
    const {miss, json} = await streamThenJson(MESSAGES, body, raw);
    assert.deepEqual(json.content, assembleAnthropic(miss).content);
    assert.deepEqual(json.content[0], {type: 'compaction', content: 'Summary: the user asked about Paris weather.',
        encrypted_content: 'EqABCz'});
});

/* A delta this code does not know: its JSON answer cannot be made, so the stream is relayed but not stored. */
h.test('a messages stream with a delta of an unknown type is relayed, not stored', async () => {
    const raw = sse([
        anEvent({type: 'message_start', message: {id: 'msg_fid7', type: 'message', role: 'assistant', model: 'claude-x',
            content: [], stop_reason: null, stop_sequence: null, usage: {input_tokens: 5, output_tokens: 1}}}),
        anEvent({type: 'content_block_start', index: 0, content_block: {type: 'text', text: ''}}),
        anEvent({type: 'content_block_delta', index: 0, delta: {type: 'text_delta', text: 'Visible '}}),
        anEvent({type: 'content_block_delta', index: 0, delta: {type: 'annotated_text_delta', text: 'and more.'}}),
        anEvent({type: 'content_block_stop', index: 0}),
        anEvent({type: 'message_delta', delta: {stop_reason: 'end_turn', stop_sequence: null}, usage: {output_tokens: 4}}),
        anEvent({type: 'message_stop'}),
    ]);
    const body = h.messagesBody(h.uniq('fidelity unknown delta'));
    const s = await post(MESSAGES, {...body, stream: true}, {'x-mock-sse': b64(raw)});
    assert.deepEqual(h.parseSSE(s.text).map((e) => JSON.parse(e.data)), h.parseSSE(raw).map((e) => JSON.parse(e.data)),
        'relayed as it came');
    const j = await post(MESSAGES, body);
    h.assertFromUpstream(j, env.mock);
});

/* ------------------------------------------------------------------------ */
/* Responses API                                                             */

h.test('responses JSON served as a stream: reasoning item, message with annotations, function call', async () => {
    const answer = {id: 'resp_fid1', object: 'response', created_at: 1700000004, status: 'completed', model: 'gpt-x',
        output: [
            {id: 'rs_1', type: 'reasoning', summary: [{type: 'summary_text', text: 'Thinking about \u{1F30D}.'}],
                encrypted_content: 'gAAAAB...=='},
            {id: 'msg_1', type: 'message', status: 'completed', role: 'assistant', content: [
                {type: 'output_text', text: 'See the docs \u2014 here.', logprobs: [],
                    annotations: [{type: 'url_citation', start_index: 0, end_index: 3, url: 'https://example.com', title: 'x'}]}]},
            {id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'call_r', name: 'get_weather',
                arguments: '{"city":"Paris"}'},
        ],
        incomplete_details: null, usage: {input_tokens: 7, output_tokens: 30, total_tokens: 37,
            input_tokens_details: {cached_tokens: 0}, output_tokens_details: {reasoning_tokens: 10}}};
    const body = {model: 'gpt-x', input: h.uniq('fidelity responses json')};
    const {json, stream} = await jsonThenStream(RESPONSES, body, asciiJson(answer));
    const events = h.parseSSE(stream).map((e) => JSON.parse(e.data));
    const last = events[events.length - 1];
    assert.equal(last.type, 'response.completed');
    assert.deepEqual(last.response, json);
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, 'See the docs \u2014 here.');
    const args = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
    assert.equal(args, '{"city":"Paris"}');
    const summary = events.filter((e) => e.type === 'response.reasoning_summary_text.delta').map((e) => e.delta).join('');
    assert.equal(summary, 'Thinking about \u{1F30D}.');
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    /* Members the API's event types require (the SDKs' typed events read them). */
    for (const e of events.filter((x) => x.type === 'response.output_text.delta' || x.type === 'response.output_text.done'))
        assert.ok(Array.isArray(e.logprobs), `${e.type} has its logprobs`);
    const done = events.find((e) => e.type === 'response.function_call_arguments.done');
    assert.equal(done.name, 'get_weather', 'function_call_arguments.done names the function');
});

h.test('responses JSON with output_text logprobs served as a stream carries them in its text events', async () => {
    const lp = [{token: 'Hi', logprob: -0.5, bytes: [72, 105], top_logprobs: []},
        {token: ' there', logprob: -1.25, bytes: [32, 116, 104, 101, 114, 101], top_logprobs: []}];
    const answer = {id: 'resp_fid2', object: 'response', created_at: 1700000006, status: 'completed', model: 'gpt-x',
        output: [{id: 'msg_2', type: 'message', status: 'completed', role: 'assistant', content: [
            {type: 'output_text', text: 'Hi there', logprobs: lp, annotations: []}]}],
        incomplete_details: null, usage: {input_tokens: 3, output_tokens: 2, total_tokens: 5}};
    const body = {model: 'gpt-x', input: h.uniq('fidelity responses logprobs'), include: ['message.output_text.logprobs']};
    const {stream} = await jsonThenStream(RESPONSES, body, asciiJson(answer));
    const events = h.parseSSE(stream).map((e) => JSON.parse(e.data));
    const deltas = events.filter((e) => e.type === 'response.output_text.delta');
    assert.deepEqual(deltas.flatMap((e) => e.logprobs), lp, 'the deltas carry the logprobs, once');
    assert.deepEqual(events.find((e) => e.type === 'response.output_text.done').logprobs, lp);
    assert.deepEqual(events.find((e) => e.type === 'response.content_part.added').part.logprobs, [],
        'the part starts without them, as its text');
});

h.test('responses stream served as JSON is its final response; the stream replays event for event', async () => {
    const resp = {id: 'resp_fid3', object: 'response', created_at: 1700000008, status: 'completed', model: 'gpt-x',
        output: [{id: 'rs_3', type: 'reasoning', summary: [], encrypted_content: 'gAAA=='},
            {id: 'msg_3', type: 'message', status: 'completed', role: 'assistant',
                content: [{type: 'output_text', text: 'Hello \u{1F30D}', logprobs: [], annotations: []}]}],
        incomplete_details: null, usage: {input_tokens: 4, output_tokens: 6, total_tokens: 10}};
    const ev = (type, more) => ({event: type, data: {type, ...more}});
    const raw = sse([
        ev('response.created', {sequence_number: 0, response: {...resp, status: 'in_progress', output: [], usage: null}}),
        ev('response.output_item.added', {sequence_number: 1, output_index: 0, item: resp.output[0]}),
        ev('response.output_item.done', {sequence_number: 2, output_index: 0, item: resp.output[0]}),
        ev('response.output_item.added', {sequence_number: 3, output_index: 1,
            item: {...resp.output[1], status: 'in_progress', content: []}}),
        ev('response.content_part.added', {sequence_number: 4, item_id: 'msg_3', output_index: 1, content_index: 0,
            part: {type: 'output_text', text: '', logprobs: [], annotations: []}}),
        ev('response.output_text.delta', {sequence_number: 5, item_id: 'msg_3', output_index: 1, content_index: 0,
            delta: 'Hello ', logprobs: []}),
        ev('response.output_text.delta', {sequence_number: 6, item_id: 'msg_3', output_index: 1, content_index: 0,
            delta: '\u{1F30D}', logprobs: []}),
        ev('response.output_item.done', {sequence_number: 7, output_index: 1, item: resp.output[1]}),
        ev('response.completed', {sequence_number: 8, response: resp}),
    ]);
    const body = {model: 'gpt-x', input: h.uniq('fidelity responses stream')};
    const {miss, json, again} = await streamThenJson(RESPONSES, body, raw);
    assert.deepEqual(json, resp);
    assert.deepEqual(h.parseSSE(again), h.parseSSE(miss));
});

/*
 * A response echoes the request's settings as the API's Python serialiser
 * writes them: "temperature": 1.0, "top_p": 1.0, a tool's JSON schema as
 * given ("minimum": 0.0). Python clients read 1.0 as a float and 1 as an
 * int: the other mode keeps the upstream's spelling of every number, in the
 * final event a stream client reads and in the JSON answer made of a stream.
 */
const RESP_NUMBERS = ['"temperature":1.0', '"top_p":1.0', '"minimum":0.0', '"maximum":12345678901234567890'];

function responseWithNumbers(id, text) {
    return `{"id":"${id}","object":"response","created_at":1700000009,"status":"completed","error":null,`
        + '"incomplete_details":null,"model":"gpt-x","output":[{"id":"msg_n","type":"message","status":"completed",'
        + `"role":"assistant","content":[{"type":"output_text","text":"${text}","logprobs":[],"annotations":[]}]}],`
        + '"temperature":1.0,"top_p":1.0,"tools":[{"type":"function","name":"f","parameters":{"type":"object",'
        + '"properties":{"x":{"type":"number","minimum":0.0,"maximum":12345678901234567890}}},"strict":false}],'
        + '"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}';
}

h.test('responses served in the other mode keep the upstream\'s spelling of numbers', async () => {
    const raw = responseWithNumbers('resp_num1', 'Numbers.');
    const body = {model: 'gpt-x', input: h.uniq('fidelity responses numbers json')};
    const {stream} = await jsonThenStream(RESPONSES, body, raw);
    const completed = h.parseSSE(stream).map((e) => e.data).find((d) => d.includes('"response.completed"'));
    for (const lit of RESP_NUMBERS)
        assert.ok(completed.includes(lit), `stream made of the JSON answer: ${lit} as written`);

    const resp = responseWithNumbers('resp_num2', 'Streamed.');
    const ev = (type, seq, more) => `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq}${more}}\n\n`;
    const rec = ev('response.created', 0, `,"response":${resp.replace('"status":"completed"', '"status":"in_progress"')}`)
        + ev('response.completed', 1, `,"response":${resp}`);
    const sbody = {model: 'gpt-x', input: h.uniq('fidelity responses numbers stream')};
    const {json} = await streamThenJson(RESPONSES, sbody, rec);
    assert.equal(json.output[0].content[0].text, 'Streamed.');
    const j = await post(RESPONSES, sbody);
    h.assertHit(j);
    for (const lit of RESP_NUMBERS)
        assert.ok(j.text.includes(lit), `JSON answer made of the stream: ${lit} as written`);
});

/* An upstream that answers every request with these JSON bytes. */
async function fixedUpstream(answer) {
    const upstream = http.createServer((req, res) => {
        req.resume();
        req.on('end', () => {
            res.writeHead(200, {'content-type': 'application/json'});
            res.end(answer);
        });
    });
    await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    return upstream;
}

/*
 * A raw NUL byte inside a JSON answer's string (no JSON, but cJSON reads it,
 * ending the string there): served as a stream it would be the text up to
 * the NUL, a sound-looking answer the upstream never gave. Not stored, as
 * the \u0000 escape is not.
 */
h.test('a JSON answer with a raw NUL byte in its text is relayed, not stored', async () => {
    const answer = Buffer.concat([Buffer.from('{"id":"chatcmpl-nul","object":"chat.completion","created":1,'
        + '"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"before'), Buffer.from([0]),
    Buffer.from(' after"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}')]);
    const upstream = await fixedUpstream(answer);
    try {
        const proxy = await env.startProxy({upstream: `http://127.0.0.1:${upstream.address().port}`});
        const body = h.chatBody(h.uniq('fidelity raw nul'));
        const first = await proxy.post(CHAT, body);
        assert.ok(first.body.equals(answer), 'relayed byte for byte');
        const s = await proxy.post(CHAT, {...body, stream: true});
        assert.notEqual(s.headers['x-cache-status'], 'HIT', 'a stream cut at the NUL is never served');
        assert.notEqual((await proxy.post(CHAT, body)).headers['x-cache-status'], 'HIT', 'not stored');
    } finally {
        upstream.close();
    }
});

/*
 * A JSON answer with text after it ("{...}{...}", a gateway writing two bodies): its clients'
 * parsers refuse it (Python's "Extra data"), the JSON library reads the first value alone, and
 * a stream made of it would serve that first value as the whole answer. Relayed, not stored.
 */
h.test('a JSON answer followed by more text is relayed, not stored', async () => {
    const one = '{"id":"chatcmpl-two","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        + '"message":{"role":"assistant","content":"FIRST"},"finish_reason":"stop"}],'
        + '"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}';
    const answer = Buffer.from(`${one}\n${one.replace('FIRST', 'SECOND')}`);
    const upstream = await fixedUpstream(answer);
    try {
        const proxy = await env.startProxy({upstream: `http://127.0.0.1:${upstream.address().port}`});
        const body = h.chatBody(h.uniq('fidelity trailing text'));
        const skipped = (await proxy.stats()).cache_store_skipped;
        const first = await proxy.post(CHAT, body);
        assert.ok(first.body.equals(answer), 'relayed byte for byte');
        await h.waitFor(async () => (await proxy.stats()).cache_store_skipped === skipped + 1,
            {what: 'the answer counted as not stored'});
        const s = await proxy.post(CHAT, {...body, stream: true});
        assert.notEqual(s.headers['x-cache-status'], 'HIT', 'the first value served as a whole stream');
        assert.notEqual((await proxy.post(CHAT, body)).headers['x-cache-status'], 'HIT', 'not stored');
        await proxy.stop();
    } finally {
        upstream.close();
    }
});

/*
 * A JSON answer naming a member twice: JavaScript clients (and Python's json)
 * read the last, the JSON library the first. Served as JSON it is the
 * upstream's bytes; a stream made of it would say the other value. It serves
 * JSON clients only (a stream client goes upstream: cache_other_mode_only).
 */
h.test('a JSON answer with a duplicate member serves JSON clients only', async () => {
    const cases = [
        [CHAT, h.chatBody(h.uniq('fidelity duplicate chat')), '{"id":"c","object":"chat.completion","created":1,'
            + '"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"AAA","content":"BBB"},'
            + '"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'],
        [MESSAGES, h.messagesBody(h.uniq('fidelity duplicate messages')), '{"id":"msg_d","type":"message",'
            + '"role":"assistant","model":"m","content":[{"type":"text","text":"AAA","text":"BBB"}],'
            + '"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}'],
    ];
    for (const [path, body, raw] of cases) {
        await post(path, body, {'x-mock-body': raw});
        const j = await post(path, body);
        h.assertHit(j);
        assert.equal(j.text, raw, `${path}: JSON clients get the upstream's bytes`);
        const s0 = await env.proxy.stats();
        const s = await post(path, {...body, stream: true});
        const s1 = await env.proxy.stats();
        assert.equal(s.headers['x-cache-status'], 'MISS', `${path}: no stream is made of it`);
        assert.doesNotMatch(s.text, /AAA/, `${path}: the stream never says the value JSON clients do not see`);
        assert.equal(s1.cache_other_mode_only, s0.cache_other_mode_only + 1);
    }
});

/*
 * "\u00zz" is no JSON escape: clients refuse the answer, but cJSON reads it
 * as U+0000 and ends the string there. Stored, the other mode would be the
 * text cut before it, readable, an answer the upstream never gave.
 */
h.test('an answer with an invalid \\u escape is relayed, not stored, in either mode', async () => {
    const text = 'before\\u00zzafter';
    const raw = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":`
        + `{"role":"assistant","content":"${text}"},"finish_reason":"stop"}],`
        + '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}';
    const body = h.chatBody(h.uniq('fidelity bad escape json'));
    assert.equal((await post(CHAT, body, {'x-mock-body': raw})).text, raw, 'relayed as it came');
    const s = await post(CHAT, {...body, stream: true});
    assert.equal(s.headers['x-cache-status'], 'MISS', 'no stream made of it');
    assert.doesNotMatch(s.text, /"before"/);
    const rec = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: 'x'}, finish_reason: null}]).replace('"x"', `"${text}"`),
        chatChunk([{index: 0, delta: {}, finish_reason: 'stop'}]),
        '[DONE]',
    ]);
    const sbody = h.chatBody(h.uniq('fidelity bad escape stream'));
    const first = await post(CHAT, {...sbody, stream: true}, {'x-mock-sse': b64(rec)});
    assert.equal(first.text, rec, 'relayed as it came');
    const j = await post(CHAT, sbody);
    assert.equal(j.headers['x-cache-status'], 'MISS', 'no JSON answer made of it');
    assert.notEqual(j.json.choices[0].message.content, 'before');
});

/* One Redis command with binary arguments; resolves with the reply's raw bytes. */
async function rawCommand(port, ...args) {
    return (await rawReply(port, ...args)).bytes;
}

/*
 * An entry read back from Redis is input: one stored by an older version, or
 * written by another hand, may hold what this version never stores (a JSON
 * answer with "\u00zz" or a raw NUL byte). It serves JSON clients as its
 * bytes, never a stream cut where cJSON ends the string.
 */
h.test('a JSON entry from Redis that cJSON would cut is never made into a stream', async () => {
    const proxy = await env.startProxy({args: ['--l1-size', '0']});
    for (const [name, bad] of [['escape', Buffer.from('\\u00zz')], ['nul', Buffer.from('\0_____')]]) {
        const raw = '{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":'
            + '{"role":"assistant","content":"before\\u00e9after"},"finish_reason":"stop"}],'
            + '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}';
        const body = h.chatBody(h.uniq(`fidelity forged entry ${name}`));
        const keys0 = new Set(await env.redis.keys('pc:2:e:*'));
        await proxy.post(CHAT, body, {'x-mock-body': raw});
        const key = (await env.redis.keys('pc:2:e:*')).find((k) => !keys0.has(k));
        assert.ok(key, 'the answer was stored');
        const reply = await rawCommand(env.redis.port, 'GET', key);
        const start = reply.indexOf('\r\n') + 2;
        const entry = Buffer.from(reply.subarray(start, reply.length - 2));
        const at = entry.indexOf('\\u00e9');
        assert.ok(at > 0);
        bad.copy(entry, at);
        await rawCommand(env.redis.port, 'SET', key, entry);
        const j = await proxy.post(CHAT, body);
        h.assertHit(j);
        assert.ok(j.body.includes(bad), `${name}: JSON clients get the entry's bytes`);
        const s = await proxy.post(CHAT, {...body, stream: true});
        assert.notEqual(s.headers['x-cache-status'], 'HIT', `${name}: no stream is made of it`);
        assert.doesNotMatch(s.text, /"before"/);
    }
});

/* ------------------------------------------------------------------------ */
/* Usage on request                                                          */

/*
 * With stream-usage no, a stream asked without include_usage is recorded
 * without the usage chunk. A later client that asks for usage must get it,
 * as the upstream would send it: not a replay without any usage. It goes
 * to the upstream, and its answer (with usage) then serves both kinds.
 */
h.test('a stream recorded without usage is no answer for a client that asks for usage', async () => {
    const proxy = await env.startProxy({args: ['--stream-usage', 'no']});
    const body = h.chatBody(h.uniq('fidelity usage asked later'));
    const first = await proxy.post(CHAT, {...body, stream: true});
    assert.equal(first.status, 200);
    assert.ok(assembleOpenAI(first.text).usage === null, 'the upstream was not asked for usage');
    h.assertHit(await proxy.post(CHAT, {...body, stream: true}));
    const calls = env.mock.callCount(CHAT);
    const asked = await proxy.post(CHAT, {...body, ...h.STREAM_WITH_USAGE});
    assert.equal(asked.status, 200);
    const a = assembleOpenAI(asked.text);
    assert.ok(a.done);
    assert.ok(a.usage && a.usage.total_tokens > 0, 'a client that asked for usage gets it');
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'from the upstream');
    const again = await proxy.post(CHAT, {...body, ...h.STREAM_WITH_USAGE});
    h.assertHit(again);
    assert.deepEqual(assembleOpenAI(again.text).usage, a.usage, 'then from the cache, with usage');
    const plain = await proxy.post(CHAT, {...body, stream: true});
    h.assertHit(plain);
    assert.equal(assembleOpenAI(plain.text).usage, null, 'and without it for a client that did not ask');
});

/*
 * A chat or completions JSON answer always carries its usage; a stream
 * carries it only when asked. A stream recorded without usage (stream-usage
 * no and a client that did not ask, or an upstream that sends none in
 * streams) is no JSON answer: assembled, it would lack the usage the
 * upstream's own JSON answer has. A JSON client goes to the upstream (a
 * MISS, counted in cache_other_mode_only), and its answer then serves both.
 */
h.test('a stream recorded without usage is no JSON answer: the upstream\'s JSON has usage', async () => {
    const proxy = await env.startProxy({args: ['--stream-usage', 'no']});
    for (const [path, body] of [[CHAT, h.chatBody(h.uniq('fidelity json from no usage'))],
        [COMPLETIONS, h.completionBody(h.uniq('fidelity json from no usage completions'))]]) {
        const first = await proxy.post(path, {...body, stream: true});
        assert.equal(first.status, 200);
        assert.equal(assembleOpenAI(first.text).usage, null, `${path}: the upstream was not asked for usage`);
        const calls = env.mock.callCount(path);
        const s0 = await proxy.stats();
        const j = await proxy.post(path, body);
        assert.equal(j.status, 200);
        assert.ok(j.json.usage && j.json.usage.total_tokens > 0, `${path}: a JSON client gets usage`);
        assert.equal(j.headers['x-cache-status'], 'MISS', `${path}: from the upstream`);
        assert.equal(env.mock.callCount(path), calls + 1);
        assert.equal((await proxy.stats()).cache_other_mode_only, s0.cache_other_mode_only + 1);
        const again = await proxy.post(path, body);
        h.assertHit(again);
        assert.deepEqual(again.json.usage, j.json.usage, `${path}: then from the cache, with usage`);
    }

    /* stream-usage yes, an upstream whose streams carry no usage although asked. */
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: 'No usage here.'}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'stop'}]),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity json from upstream without usage'));
    h.assertFromUpstream(await post(CHAT, {...body, stream: true}, {'x-mock-sse': b64(raw)}), env.mock);
    const j = await post(CHAT, body);
    assert.ok(j.json.usage && j.json.usage.total_tokens > 0, 'a JSON client gets usage');
    assert.equal(j.headers['x-cache-status'], 'MISS');
});

/*
 * vLLM and SGLang put usage in every chunk of a stream asked with
 * stream_options.continuous_usage_stats (running totals). A client that did
 * not ask gets no usage in its chunks from them; one that sums the usage of
 * every chunk (LangChain adds up usage_metadata) would count the answer's
 * tokens again with each chunk of such a recording. And a client that asks
 * must get them: a stream without them is not what the upstream sends it.
 */
h.test('a stream with usage in every chunk (continuous_usage_stats) serves only clients that ask for it', async () => {
    const u = (c) => ({prompt_tokens: 5, completion_tokens: c, total_tokens: 5 + c});
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: ''}, finish_reason: null}], {usage: u(0)}),
        chatChunk([{index: 0, delta: {content: 'Running'}, finish_reason: null}], {usage: u(1)}),
        chatChunk([{index: 0, delta: {content: ' totals.'}, finish_reason: null}], {usage: u(2)}),
        chatChunk([{index: 0, delta: {}, finish_reason: 'stop'}], {usage: u(2)}),
        chatChunk([], {usage: u(2)}),
        '[DONE]',
    ]);
    const continuous = {stream: true, stream_options: {include_usage: true, continuous_usage_stats: true}};
    const chunkUsage = (text) => assembleOpenAI(text).chunks.filter((c) => c.choices.length > 0)
        .map((c) => c.usage).filter((x) => x !== null && x !== undefined);
    const body = h.chatBody(h.uniq('fidelity continuous usage'));
    const first = await post(CHAT, {...body, ...continuous}, {'x-mock-sse': b64(raw)});
    assert.equal(chunkUsage(first.text).length, 4, 'the upstream\'s running totals');
    for (const extra of [{stream: true}, h.STREAM_WITH_USAGE]) {
        const plain = await post(CHAT, {...body, ...extra});
        assert.deepEqual(chunkUsage(plain.text), [], `${JSON.stringify(extra)}: no usage in the chunks of the text`);
    }
    const body2 = h.chatBody(h.uniq('fidelity continuous usage asked later'));
    h.assertFromUpstream(await post(CHAT, {...body2, ...h.STREAM_WITH_USAGE}), env.mock);
    const asked = await post(CHAT, {...body2, ...continuous}, {'x-mock-sse': b64(raw)});
    assert.equal(chunkUsage(asked.text).length, 4, 'a client that asks for running totals gets them');
});

/* ------------------------------------------------------------------------ */
/* Savings                                                                   */

/* Tokens saved by one hit: what the stored answer's usage says, once, in either mode. */
async function savedBy(fn) {
    const s0 = await env.proxy.stats();
    await fn();
    const s1 = await env.proxy.stats();
    return {prompt: s1.tokens_saved_prompt - s0.tokens_saved_prompt,
        completion: s1.tokens_saved_completion - s0.tokens_saved_completion};
}

h.test('a hit in the other mode saves the tokens the stored answer used, once', async () => {
    const an = sse([
        anEvent({type: 'message_start', message: {id: 'msg_fid5', type: 'message', role: 'assistant', model: 'claude-x',
            content: [], stop_reason: null, stop_sequence: null,
            usage: {input_tokens: 20, cache_creation_input_tokens: 7, cache_read_input_tokens: 4, output_tokens: 1}}}),
        anEvent({type: 'content_block_start', index: 0, content_block: {type: 'text', text: ''}}),
        anEvent({type: 'content_block_delta', index: 0, delta: {type: 'text_delta', text: 'Hi.'}}),
        anEvent({type: 'content_block_stop', index: 0}),
        anEvent({type: 'message_delta', delta: {stop_reason: 'end_turn', stop_sequence: null}, usage: {output_tokens: 90}}),
        anEvent({type: 'message_stop'}),
    ]);
    const body = h.messagesBody(h.uniq('fidelity savings messages'));
    await post(MESSAGES, {...body, stream: true}, {'x-mock-sse': b64(an)});
    assert.deepEqual(await savedBy(async () => h.assertHit(await post(MESSAGES, body))), {prompt: 31, completion: 90});
    assert.deepEqual(await savedBy(async () => h.assertHit(await post(MESSAGES, {...body, stream: true}))),
        {prompt: 31, completion: 90});

    const chat = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: 'Hi.'}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'stop'}]),
        chatChunk([], {usage: {prompt_tokens: 13, completion_tokens: 3, total_tokens: 16}}),
        '[DONE]',
    ]);
    const cbody = h.chatBody(h.uniq('fidelity savings chat'));
    await post(CHAT, {...cbody, ...h.STREAM_WITH_USAGE}, {'x-mock-sse': b64(chat)});
    assert.deepEqual(await savedBy(async () => h.assertHit(await post(CHAT, cbody))), {prompt: 13, completion: 3});
    assert.deepEqual(await savedBy(async () => h.assertHit(await post(CHAT, {...cbody, stream: true}))),
        {prompt: 13, completion: 3}, 'a client that did not ask for usage saves the same');
});

/*
 * With stream-usage yes every chat stream is asked for usage: a recording
 * without it comes from an upstream that sends none even when asked, and is
 * what that upstream would send a client asking for usage: a hit.
 */
h.test('a stream from an upstream that sends no usage even when asked serves clients that ask', async () => {
    const raw = sse([
        chatChunk([{index: 0, delta: {role: 'assistant', content: 'No usage here.'}, finish_reason: null}]),
        chatChunk([{index: 0, delta: {}, finish_reason: 'stop'}]),
        '[DONE]',
    ]);
    const body = h.chatBody(h.uniq('fidelity upstream without usage'));
    const first = await post(CHAT, {...body, ...h.STREAM_WITH_USAGE}, {'x-mock-sse': b64(raw)});
    h.assertFromUpstream(first, env.mock);
    const again = await post(CHAT, {...body, ...h.STREAM_WITH_USAGE});
    h.assertHit(again);
    assert.deepEqual(h.parseSSE(again.text), h.parseSSE(first.text), 'what the upstream sent, as it sent it');
});
