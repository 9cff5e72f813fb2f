'use strict';
/*
 * Odd but valid SSE framing from the upstream (a byte order mark, CR or CRLF
 * line ends, comments, id/retry fields, multi-line data, one byte per write,
 * a doubled [DONE]): a later identical request, as a stream or as JSON,
 * gets the answer the upstream sent, or goes to the upstream again; never
 * an answer with text lost.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';

function chunk(delta, finish = null) {
    return JSON.stringify({id: 'chatcmpl-framing', object: 'chat.completion.chunk', created: 1,
        model: 'gpt-4o-mini', choices: [{index: 0, delta, finish_reason: finish}]});
}

const EVENTS = [
    chunk({role: 'assistant', content: 'Hello'}),
    chunk({content: ', framed'}),
    chunk({content: ' world.'}),
    chunk({}, 'stop'),
    /* The usage chunk the proxy asks for (stream-usage): a JSON answer carries usage. */
    JSON.stringify({id: 'chatcmpl-framing', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini',
        choices: [], usage: {prompt_tokens: 3, completion_tokens: 4, total_tokens: 7}}),
];
const TEXT = 'Hello, framed world.';

/* The stream as the upstream writes it, with line end eol and optional extras. */
function stream({eol = '\n', bom = false, extra = ''} = {}) {
    let s = bom ? '\ufeff' : '';
    for (const ev of EVENTS)
        s += `${extra}data: ${ev}${eol}${eol}`;
    return s + `data: [DONE]${eol}${eol}`;
}

/* Ask as a stream, then as JSON and as a stream again: each carries the upstream's text. */
async function roundTrip(raw, bytes = false) {
    const body = h.chatBody(h.uniq('framing'));
    const headers = {'x-mock-sse': Buffer.from(raw).toString('base64')};
    if (bytes)
        headers['x-mock-sse-bytes'] = '1';
    const first = await env.proxy.post(CHAT, {...body, stream: true}, headers);
    assert.equal(first.status, 200, first.text.slice(0, 300));
    const j = await env.proxy.post(CHAT, body, headers);
    assert.equal(j.status, 200, j.text.slice(0, 300));
    if (j.headers['x-cache-status'] === 'HIT')
        assert.equal(j.json.choices[0].message.content, TEXT, 'JSON assembled from the stream');
    const again = await env.proxy.post(CHAT, {...body, stream: true}, headers);
    assert.equal(again.status, 200);
    const a = h.assembleChat(h.parseSSE(again.text));
    assert.equal(a.content, TEXT, 'the stream replayed');
    assert.ok(a.done);
    return {json: j, again};
}

h.test('a stream opening with a byte order mark is replayed whole', async () => {
    const r = await roundTrip(stream({bom: true}));
    h.assertHit(r.json);
});

h.test('CR, CRLF, comments, id and retry fields, one byte per write', async () => {
    for (const eol of ['\n', '\r\n', '\r'])
        for (const bytes of [false, true]) {
            const r = await roundTrip(stream({eol, extra: `: ping${eol}id: 7${eol}retry: 100${eol}event: ${''}`
                .replace(/event: $/, '')}), bytes);
            h.assertHit(r.json);
            h.assertHit(r.again);
        }
});

h.test('multi-line data and a doubled [DONE]', async () => {
    const multi = EVENTS.map((ev) => `data: ${ev.replace(',"choices"', '\ndata: ,"choices"')}\n\n`).join('');
    const r = await roundTrip(multi + 'data: [DONE]\n\ndata: [DONE]\n\n');
    h.assertHit(r.json);
});

/* ------------------------------------------------------------------------ */
/* Anthropic tool input: numbers as the upstream wrote them                   */

const MESSAGES = '/v1/messages';
const INPUT = '{"account": 12345678901234567890, "ratio": 1.0, "count": 1e2, "n": 7}';

function anEvent(name, obj) {
    return `event: ${name}\ndata: ${JSON.stringify(obj)}\n\n`;
}

function toolStream() {
    const delta = (part) => anEvent('content_block_delta', {type: 'content_block_delta', index: 0,
        delta: {type: 'input_json_delta', partial_json: part}});
    return anEvent('message_start', {type: 'message_start', message: {id: 'msg_numbers', type: 'message',
        role: 'assistant', model: 'claude-x', content: [], stop_reason: null, stop_sequence: null,
        usage: {input_tokens: 5, output_tokens: 1}}})
        + anEvent('content_block_start', {type: 'content_block_start', index: 0,
            content_block: {type: 'tool_use', id: 'toolu_n', name: 'lookup', input: {}}})
        + delta(INPUT.slice(0, 20)) + delta(INPUT.slice(20))
        + anEvent('content_block_stop', {type: 'content_block_stop', index: 0})
        + anEvent('message_delta', {type: 'message_delta', delta: {stop_reason: 'tool_use', stop_sequence: null},
            usage: {output_tokens: 9}})
        + anEvent('message_stop', {type: 'message_stop'});
}

/* Every number of INPUT, spelled as written (Python reads 1.0 as a float, 12345678901234567890 exactly). */
function assertNumbersKept(text, what) {
    for (const lit of ['12345678901234567890', '1.0', '1e2', '7'])
        assert.match(text, new RegExp(`:\\s*${lit.replace('.', '\\.')}[,}]`), `${what}: ${lit} as written`);
}

h.test('tool input numbers survive a stream served as JSON', async () => {
    const body = h.messagesBody(h.uniq('tool numbers stream'));
    const headers = {'x-mock-sse': Buffer.from(toolStream()).toString('base64')};
    const s = await env.proxy.post(MESSAGES, {...body, stream: true}, headers);
    assert.equal(s.status, 200, s.text.slice(0, 300));
    const j = await env.proxy.post(MESSAGES, body);
    if (j.headers['x-cache-status'] === 'HIT')
        assertNumbersKept(j.text, 'JSON assembled from the stream');
});

h.test('tool input numbers survive a JSON answer served as a stream', async () => {
    const body = h.messagesBody(h.uniq('tool numbers json'));
    const raw = JSON.stringify({id: 'msg_numbers', type: 'message', role: 'assistant', model: 'claude-x',
        content: [{type: 'tool_use', id: 'toolu_n', name: 'lookup', input: {}}], stop_reason: 'tool_use',
        stop_sequence: null, usage: {input_tokens: 5, output_tokens: 9}}).replace('"input":{}', `"input":${INPUT}`);
    const j = await env.proxy.post(MESSAGES, body, {'x-mock-body': raw});
    assert.equal(j.status, 200, j.text.slice(0, 300));
    h.assertHit(await env.proxy.post(MESSAGES, body));
    const s0 = await env.proxy.stats();
    const s = await env.proxy.post(MESSAGES, {...body, stream: true}, {'x-mock-body': raw});
    assert.equal(s.status, 200, s.text.slice(0, 300));
    /* The entry is sound: a stream client is a miss, not a corrupt entry. */
    const s1 = await env.proxy.stats();
    assert.equal(s.headers['x-cache-status'], 'MISS');
    assert.equal(s1.cache_corrupt, s0.cache_corrupt, 'not counted as corrupt');
    assert.equal(s1.cache_other_mode_only, (s0.cache_other_mode_only || 0) + 1, 'counted as other mode only');
    assert.equal(s1.cache_misses, s0.cache_misses + 1);
    h.assertHit(await env.proxy.post(MESSAGES, body)); /* the JSON entry still serves JSON clients */
    if (s.headers['x-cache-status'] === 'HIT') {
        const partial = h.parseSSE(s.text).map((e) => JSON.parse(e.data))
            .filter((d) => d.delta && d.delta.type === 'input_json_delta').map((d) => d.delta.partial_json).join('');
        assertNumbersKept(partial, 'stream made of the JSON answer');
    }
});
