'use strict';
/*
 * An answer that ends in good order but never says why the generation
 * stopped is not known to be whole: an OpenAI stream ending with
 * `data: [DONE]` whose choices never carried a finish_reason, an Anthropic
 * stream ending with message_stop whose stop_reason stayed null, the same
 * in a JSON answer, a Responses API answer not completed. Servers and
 * gateways hitting an error mid-generation end a stream that way. Such an
 * answer is relayed to the client that asked, as it came, but never stored
 * (cache_store_skipped), so a later client is not served it as a whole
 * answer: its identical request goes to the upstream again.
 * A generation cut at its token limit ("length", "max_tokens", an
 * "incomplete" response with its reason) is a finished answer and is
 * stored, as before.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const CMPL = '/v1/completions';
const MESSAGES = '/v1/messages';
const RESP = '/v1/responses';

const sse = (events) => ({'x-mock-sse': Buffer.from(events.join('')).toString('base64')});
const data = (obj) => `data: ${JSON.stringify(obj)}\n\n`;
const named = (type, obj) => `event: ${type}\ndata: ${JSON.stringify({type, ...obj})}\n\n`;

/* A chat stream: n choices, each given its pieces, then its finish reason. */
function chatStream(finishes, {text = 'partial answer'} = {}) {
    const base = {id: 'chatcmpl-unfinished', object: 'chat.completion.chunk', created: 1, model: h.CHAT_MODEL};
    const out = [];
    finishes.forEach((_, index) =>
        out.push(data({...base, choices: [{index, delta: {role: 'assistant', content: ''}, finish_reason: null}]})));
    finishes.forEach((_, index) =>
        out.push(data({...base, choices: [{index, delta: {content: `${text} ${index}`}, finish_reason: null}]})));
    finishes.forEach((finish, index) =>
        out.push(data({...base, choices: [{index, delta: {}, finish_reason: finish}]})));
    out.push(data({...base, choices: [], usage: {prompt_tokens: 5, completion_tokens: 3, total_tokens: 8}}));
    out.push('data: [DONE]\n\n');
    return out;
}

/* A legacy completions stream with one choice. */
function completionStream(finish) {
    const base = {id: 'cmpl-unfinished', object: 'text_completion', created: 1, model: h.COMPLETION_MODEL};
    return [
        data({...base, choices: [{index: 0, text: 'once upon', logprobs: null, finish_reason: null}]}),
        data({...base, choices: [{index: 0, text: ' a time', logprobs: null, finish_reason: finish}]}),
        data({...base, choices: [], usage: {prompt_tokens: 5, completion_tokens: 3, total_tokens: 8}}),
        'data: [DONE]\n\n',
    ];
}

/* An Anthropic stream; delta is the message_delta's delta (none: no message_delta at all). */
function messageStream(delta) {
    const out = [
        named('message_start', {message: {id: 'msg_unfinished', type: 'message', role: 'assistant',
            model: h.CLAUDE_MODEL, content: [], stop_reason: null, stop_sequence: null,
            usage: {input_tokens: 5, output_tokens: 1}}}),
        named('content_block_start', {index: 0, content_block: {type: 'text', text: ''}}),
        named('content_block_delta', {index: 0, delta: {type: 'text_delta', text: 'partial answer'}}),
        named('content_block_stop', {index: 0}),
    ];
    if (delta !== undefined)
        out.push(named('message_delta', {delta, usage: {output_tokens: 3}}));
    out.push(named('message_stop', {}));
    return out;
}

const chatJson = (choices) => JSON.stringify({id: 'chatcmpl-unfinished', object: 'chat.completion', created: 1,
    model: h.CHAT_MODEL, choices, usage: {prompt_tokens: 5, completion_tokens: 3, total_tokens: 8}});
const chatChoice = (index, finish) => ({index, message: {role: 'assistant', content: `partial answer ${index}`},
    logprobs: null, ...(finish === undefined ? {} : {finish_reason: finish})});

const messageJson = (stop) => JSON.stringify({id: 'msg_unfinished', type: 'message', role: 'assistant',
    model: h.CLAUDE_MODEL, content: [{type: 'text', text: 'partial answer'}], stop_sequence: null,
    ...(stop === undefined ? {} : {stop_reason: stop}), usage: {input_tokens: 5, output_tokens: 3}});

/* A Responses API answer with this status and incomplete_details. */
function response(status, incomplete = null) {
    return {id: 'resp_unfinished', object: 'response', created_at: 1, status, error: null,
        incomplete_details: incomplete, model: 'gpt-4.1-mini',
        output: [{type: 'message', id: 'msg_1', status: status === 'completed' ? 'completed' : 'incomplete',
            role: 'assistant', content: [{type: 'output_text', text: 'partial answer', annotations: []}]}],
        usage: {input_tokens: 5, output_tokens: 3, total_tokens: 8}};
}

/* A Responses API stream: created, a text delta, then the final events given. */
function responseStream(final) {
    let seq = 0;
    const ev = (type, obj) => named(type, {sequence_number: seq++, ...obj});
    const out = [
        ev('response.created', {response: {...response('in_progress'), output: []}}),
        ev('response.output_text.delta', {item_id: 'msg_1', output_index: 0, content_index: 0,
            delta: 'partial answer'}),
    ];
    for (const [type, obj] of final)
        out.push(ev(type, obj));
    return out;
}

const CASES = {
    chat: {path: CHAT, body: (q, s) => h.chatBody(q, s ? {stream: true} : {})},
    chat2: {path: CHAT, body: (q, s) => h.chatBody(q, {n: 2, ...(s ? {stream: true} : {})})},
    completions: {path: CMPL, body: (q, s) => h.completionBody(q, s ? {stream: true} : {})},
    messages: {path: MESSAGES, body: (q, s) => h.messagesBody(q, s ? {stream: true} : {})},
    responses: {path: RESP, body: (q, s) => ({model: 'gpt-4.1-mini', input: q, ...(s ? {stream: true} : {})})},
};

/*
 * Ask once with the scripted answer: it is relayed (200, the text the
 * upstream sent) and counted as not stored. The same request again (in
 * the other mode, which a stored answer would serve too) reaches the
 * upstream; the upstream's whole answer to it is then stored as usual, and
 * the first mode hits that one, never the first answer.
 */
async function notStored(kind, stream, headers, relayed) {
    const c = CASES[kind];
    const q = h.uniq(`unfinished ${kind}`);
    const before = await env.proxy.stats();
    const calls = env.mock.callCount(c.path);
    const r = await env.proxy.post(c.path, c.body(q, stream), headers);
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal(r.headers['x-cache-status'], 'MISS');
    assert.ok(r.text.includes(relayed), `relayed as it came: ${r.text.slice(0, 300)}`);
    const after = await env.proxy.stats();
    assert.equal(after.cache_store_skipped - before.cache_store_skipped, 1, 'counted as not stored');
    assert.equal(after.cache_stores - before.cache_stores, 0, 'not stored');
    const other = await env.proxy.post(c.path, c.body(q, !stream));
    assert.equal(other.status, 200, other.text.slice(0, 300));
    assert.equal(other.headers['x-cache-status'], 'MISS', 'not served from the cache in the other mode');
    assert.ok(!other.text.includes('partial answer'), 'the upstream\'s new answer');
    assert.equal(env.mock.callCount(c.path), calls + 2, 'it went upstream');
    /* The same mode now hits what that second call stored, never the first answer. */
    const same = await env.proxy.post(c.path, c.body(q, stream));
    h.assertHit(same);
    assert.ok(!same.text.includes('partial answer'), same.text.slice(0, 300));
}

/* The scripted answer is stored: the same request hits and carries its text. */
async function stored(kind, stream, headers, text) {
    const c = CASES[kind];
    const q = h.uniq(`finished ${kind}`);
    const before = await env.proxy.stats();
    const r = await env.proxy.post(c.path, c.body(q, stream), headers);
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal((await env.proxy.stats()).cache_stores - before.cache_stores, 1, 'stored');
    const hit = await env.proxy.post(c.path, c.body(q, !stream));
    h.assertHit(hit);
    assert.ok(hit.text.includes(text), hit.text.slice(0, 300));
}

/* ---- streams that end properly without a finish reason --------------------- */

h.test('a chat stream ending with [DONE] but no finish_reason is relayed, not stored', async () => {
    await notStored('chat', true, sse(chatStream([null])), 'partial answer 0');
});

h.test('a completions stream ending with [DONE] but no finish_reason is not stored', async () => {
    await notStored('completions', true, sse(completionStream(null)), 'once upon');
});

h.test('an Anthropic stream ending with message_stop but a null stop_reason is not stored', async () => {
    await notStored('messages', true, sse(messageStream({stop_reason: null, stop_sequence: null})), 'partial answer');
});

h.test('an Anthropic stream with message_stop but no message_delta is not stored', async () => {
    await notStored('messages', true, sse(messageStream()), 'partial answer');
});

h.test('n=2: a stream where one choice never got its finish_reason is not stored', async () => {
    await notStored('chat2', true, sse(chatStream(['stop', null])), 'partial answer 1');
});

h.test('a stream whose choice ended with "abort" (vLLM, SGLang: the engine dropped the request) is not stored', async () => {
    await notStored('chat', true, sse(chatStream(['abort'])), 'partial answer 0');
    await notStored('completions', true, sse(completionStream('abort')), 'once upon');
    await notStored('chat2', true, sse(chatStream(['stop', 'error'])), 'partial answer 1');
});

/* ---- JSON answers without a finish reason ------------------------------------ */

h.test('a chat JSON answer with finish_reason null, or none, is not stored', async () => {
    await notStored('chat', false, {'x-mock-body': chatJson([chatChoice(0, null)])}, 'partial answer 0');
    await notStored('chat', false, {'x-mock-body': chatJson([chatChoice(0)])}, 'partial answer 0');
});

h.test('n=2: a chat JSON answer where one choice has finish_reason null is not stored', async () => {
    await notStored('chat2', false, {'x-mock-body': chatJson([chatChoice(0, 'stop'), chatChoice(1, null)])},
        'partial answer 1');
});

h.test('a completions JSON answer with finish_reason null is not stored', async () => {
    const text = JSON.stringify({id: 'cmpl-unfinished', object: 'text_completion', created: 1,
        model: h.COMPLETION_MODEL, choices: [{index: 0, text: 'partial answer', logprobs: null, finish_reason: null}]});
    await notStored('completions', false, {'x-mock-body': text}, 'partial answer');
});

h.test('an Anthropic JSON answer with stop_reason null, or none, is not stored', async () => {
    await notStored('messages', false, {'x-mock-body': messageJson(null)}, 'partial answer');
    await notStored('messages', false, {'x-mock-body': messageJson()}, 'partial answer');
});

/* ---- the Responses API --------------------------------------------------------- */

h.test('a Responses answer in progress, failed or incomplete without a reason is not stored', async () => {
    await notStored('responses', false, {'x-mock-body': JSON.stringify(response('in_progress'))}, 'partial answer');
    await notStored('responses', false, {'x-mock-body': JSON.stringify(response('incomplete'))}, 'partial answer');
    await notStored('responses', false, {'x-mock-body': JSON.stringify(
        {...response('failed'), error: {code: 'server_error', message: 'The model failed'}})}, 'partial answer');
});

h.test('a Responses stream without response.completed, or whose response is not done, is not stored', async () => {
    await notStored('responses', true, sse(responseStream([])), 'partial answer');
    await notStored('responses', true, sse(responseStream([['response.completed',
        {response: response('in_progress')}]])), 'partial answer');
    await notStored('responses', true, sse(responseStream([['response.incomplete',
        {response: response('incomplete')}]])), 'partial answer');
});

/* ---- answers cut at their limit are finished: stored as before --------------------- */

h.test('finish_reason "length", stop_reason "max_tokens" and an incomplete response with its reason are stored', async () => {
    await stored('chat', true, sse(chatStream(['length'])), 'partial answer 0');
    await stored('chat2', true, sse(chatStream(['stop', 'length'])), 'partial answer 1');
    await stored('completions', true, sse(completionStream('length')), 'once upon a time');
    await stored('chat', false, {'x-mock-body': chatJson([chatChoice(0, 'length')])}, 'partial answer 0');
    await stored('messages', true, sse(messageStream({stop_reason: 'max_tokens', stop_sequence: null})),
        'partial answer');
    await stored('messages', false, {'x-mock-body': messageJson('max_tokens')}, 'partial answer');
    const cut = response('incomplete', {reason: 'max_output_tokens'});
    await stored('responses', false, {'x-mock-body': JSON.stringify(cut)}, 'partial answer');
    await stored('responses', true, sse(responseStream([['response.incomplete', {response: cut}]])),
        'partial answer');
});
