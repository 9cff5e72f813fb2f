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
