'use strict';
/*
 * Exact cache: an identical request is answered from Redis without calling
 * the upstream; any change that alters the answer misses. A HIT is proven by
 * the mock's call count not moving and by getting the earlier call's answer
 * (which names that call's sequence number) back.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';

/* POST twice; the first must come from the upstream, the second from the cache. */
async function missThenHit(path, body, headers) {
    const calls = env.mock.callCount(path);
    const first = await env.proxy.post(path, body, headers);
    assert.equal(first.status, 200, first.text);
    h.assertFromUpstream(first, env.mock);
    assert.equal(env.mock.callCount(path), calls + 1, 'the miss called the upstream once');

    const second = await env.proxy.post(path, body, headers);
    h.assertHit(second);
    assert.equal(env.mock.callCount(path), calls + 1, 'the hit did not call the upstream');
    return [first, second];
}

/* Prime the cache with body, then expect changed to miss and reach the upstream. */
async function expectMissAfter(body, changed) {
    await env.proxy.post(CHAT, body);
    const calls = env.mock.callCount(CHAT);
    const r = await env.proxy.post(CHAT, changed);
    assert.equal(r.status, 200, r.text);
    h.assertFromUpstream(r, env.mock);
    assert.equal(env.mock.callCount(CHAT), calls + 1);
    return r;
}

h.test('second identical chat completion is a HIT with the same answer', async () => {
    const [first, second] = await missThenHit(CHAT, h.chatBody(h.uniq('capital of France')));
    assert.deepEqual(second.json, first.json);
    assert.match(String(second.headers['content-type']), /application\/json/);
});

h.test('second identical Anthropic message is a HIT with the same answer', async () => {
    const [first, second] = await missThenHit('/v1/messages', h.messagesBody(h.uniq('hello claude')));
    assert.deepEqual(second.json, first.json);
});

h.test('second identical legacy completion is a HIT', async () => {
    const [first, second] = await missThenHit('/v1/completions', h.completionBody(h.uniq('Once upon')));
    assert.deepEqual(second.json, first.json);
});

h.test('second identical embeddings request is a HIT with the same vectors', async () => {
    const body = h.embeddingBody([h.uniq('first text'), h.uniq('second text')]);
    const [first, second] = await missThenHit('/v1/embeddings', body);
    assert.equal(second.json.data.length, 2);
    assert.deepEqual(second.json, first.json);
});

h.test('a full-size embedding (1536 floats) is stored and hit whole', async () => {
    const body = h.embeddingBody(h.uniq('a long vector'), {dimensions: 1536});
    const [first, second] = await missThenHit('/v1/embeddings', body);
    assert.equal(first.json.data[0].embedding.length, 1536);
    assert.deepEqual(second.json, first.json);
});

h.test('embeddings asked as base64, as float, with other dimensions or as token arrays are cached apart', async () => {
    const text = h.uniq('encoding apart');
    const float = h.embeddingBody(text, {encoding_format: 'float'});
    await missThenHit('/v1/embeddings', float);
    for (const other of [h.embeddingBody(text, {encoding_format: 'base64'}), h.embeddingBody(text),
        h.embeddingBody(text, {encoding_format: 'float', dimensions: 8}),
        h.embeddingBody([text, text], {encoding_format: 'float'}),
        {...float, input: [[1, 2, 3]]}]) {
        const r = await env.proxy.post('/v1/embeddings', other);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-cache-status'], 'MISS', JSON.stringify(other).slice(0, 120));
    }
});

h.test('a HIT returns the earlier call\'s answer, not a new one', async () => {
    const body = h.chatBody(h.uniq('which call answers'));
    const first = await env.proxy.post(CHAT, body);
    const seq = h.answerSeq(h.chatText(first.json));
    for (let i = 0; i < 3; i++) {
        const again = await env.proxy.post(CHAT, body);
        h.assertHit(again);
        assert.equal(h.answerSeq(h.chatText(again.json)), seq);
    }
});

h.test('key order and white space in the JSON do not matter', async () => {
    const q = h.uniq('order test');
    const compact = `{"model":"gpt-4o-mini","temperature":0.5,"messages":[{"role":"user","content":"${q}"}]}`;
    const reordered = `{
        "messages" : [ { "content" : "${q}", "role" : "user" } ],
        "temperature" : 0.5,
        "model" : "gpt-4o-mini"
    }`;
    const first = await env.proxy.post(CHAT, compact);
    h.assertFromUpstream(first, env.mock);
    const calls = env.mock.callCount(CHAT);
    const second = await env.proxy.post(CHAT, reordered);
    h.assertHit(second);
    assert.equal(env.mock.callCount(CHAT), calls);
    assert.equal(h.chatText(second.json), h.chatText(first.json));
});

h.test('fields that do not change the answer (user) are left out of the key', async () => {
    const body = h.chatBody(h.uniq('user field'));
    await env.proxy.post(CHAT, {...body, user: 'alice'});
    const r = await env.proxy.post(CHAT, {...body, user: 'bob'});
    h.assertHit(r);
});

h.test('a different model misses', async () => {
    const body = h.chatBody(h.uniq('model change'));
    await expectMissAfter(body, {...body, model: 'gpt-4o'});
});

h.test('a different user message misses', async () => {
    const body = h.chatBody(h.uniq('message change'));
    const changed = h.chatBody(`${body.messages[1].content} please`);
    const r = await expectMissAfter(body, changed);
    assert.match(h.chatText(r.json), /please/);
});

h.test('a different system message misses', async () => {
    const body = h.chatBody(h.uniq('system change'));
    const changed = structuredClone(body);
    changed.messages[0].content = 'You are verbose.';
    await expectMissAfter(body, changed);
});

h.test('adding a tool misses', async () => {
    const body = h.chatBody(h.uniq('tool change'));
    const r = await expectMissAfter(body, {...body, tools: [h.OPENAI_TOOL]});
    assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
});

h.test('a different temperature misses', async () => {
    const body = h.chatBody(h.uniq('temperature change'), {temperature: 0.2});
    await expectMissAfter(body, {...body, temperature: 0.9});
});

h.test('a different max_tokens misses', async () => {
    const body = h.messagesBody(h.uniq('max tokens change'));
    await env.proxy.post('/v1/messages', body);
    const calls = env.mock.callCount('/v1/messages');
    const r = await env.proxy.post('/v1/messages', {...body, max_tokens: 17});
    h.assertFromUpstream(r, env.mock);
    assert.equal(env.mock.callCount('/v1/messages'), calls + 1);
});

h.test('the same question on another endpoint misses', async () => {
    const q = h.uniq('endpoint change');
    await env.proxy.post(CHAT, h.chatBody(q));
    const r = await env.proxy.post('/v1/completions', h.completionBody(q));
    h.assertFromUpstream(r, env.mock);
});

h.test('the upstream receives every field of the client\'s request', async () => {
    const body = h.chatBody(h.uniq('forwarded body'), {temperature: 0.3, max_tokens: 50});
    await env.proxy.post(CHAT, body);
    const got = env.mock.lastRequest(CHAT);
    assert.equal(got.method, 'POST');
    /* A subset check: the proxy may add backend hints (e.g. a prompt cache key). */
    for (const [k, v] of Object.entries(body))
        assert.deepEqual(got.body[k], v, `field ${k}`);
});

/*
 * A request naming an existing container runs code against the files that
 * earlier requests left there: the same body may deserve another answer, and
 * a hit would leave the container without its run. Never cached; a request
 * asking for a new container (no id) is cached as usual.
 */
h.test('a Messages request naming a container is never cached', async () => {
    const s0 = await env.proxy.stats();
    const named = {...h.messagesBody(h.uniq('container named')), container: 'container_011abc'};
    const calls = env.mock.callCount('/v1/messages');
    assert.equal((await env.proxy.post('/v1/messages', named)).cache, 'BYPASS');
    assert.equal((await env.proxy.post('/v1/messages', named)).cache, 'BYPASS');
    const byId = {...h.messagesBody(h.uniq('container by id')), container: {id: 'container_011abc', skills: []}};
    assert.equal((await env.proxy.post('/v1/messages', byId)).cache, 'BYPASS');
    assert.equal(env.mock.callCount('/v1/messages'), calls + 3);
    assert.equal((await env.proxy.stats()).requests_uncacheable, s0.requests_uncacheable + 3);
    const fresh = {...h.messagesBody(h.uniq('container fresh')), container: {skills: [{type: 'anthropic', skill_id: 'pptx'}]}};
    await missThenHit('/v1/messages', fresh);
});

h.test('a body naming a member twice is never answered from the cache nor stored', async () => {
    /*
     * Which copy counts is the upstream parser's choice: Python's, Go's and JavaScript's
     * take the last, serde's refuses, RapidJSON's, yyjson's and gjson's take the first.
     * The key took the last, so a body whose first "messages" asked something else shared
     * the key, and so the entry, of the plain body with the second (in a shared namespace,
     * another tenant's entry): the upstream decides such a body, every time.
     */
    const q = h.uniq('the plain question');
    const plain = h.chatBody(q);
    const first = await env.proxy.post(CHAT, plain);
    assert.equal(first.status, 200, first.text);
    h.assertHit(await env.proxy.post(CHAT, plain));
    const messages = JSON.stringify(plain.messages);
    const other = JSON.stringify([{role: 'user', content: h.uniq('another question')}]);
    const twice = `{"model":${JSON.stringify(plain.model)},"messages":${other},"messages":${messages}}`;
    const calls = env.mock.callCount(CHAT);
    const r = await env.proxy.post(CHAT, twice);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.cache, 'BYPASS', 'answered with the plain body\'s entry');
    assert.equal(env.mock.callCount(CHAT), calls + 1);
    assert.equal((await env.proxy.post(CHAT, twice)).cache, 'BYPASS');
    /* A repeat deeper down counts too; the plain body still hits its own entry. */
    const deep = `{"model":${JSON.stringify(plain.model)},"messages":[{"role":"user","content":"x",` +
        `"content":${JSON.stringify(q)}}]}`;
    assert.equal((await env.proxy.post(CHAT, deep)).cache, 'BYPASS');
    h.assertHit(await env.proxy.post(CHAT, plain));
});
