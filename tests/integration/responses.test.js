'use strict';
/*
 * OpenAI's Responses API (POST /v1/responses) through the cache: JSON and
 * SSE answers are stored and served in both directions like chat
 * completions; the key covers instructions, input items, tools, reasoning,
 * previous_response_id and store; background responses and conversations
 * are never cached; and an id served from the cache resolves at the
 * provider for the tenant it was served to (the mock keeps stored responses
 * per credential, as the provider does).
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxyArgs: ['--shared-namespaces', 'public']});
const RESP = '/v1/responses';

const body = (input, extra = {}) => ({model: 'gpt-4.1-mini', input, ...extra});
const text = (resp) => resp.output.filter((i) => i.type === 'message')
    .flatMap((i) => i.content).map((c) => c.text).join('');

/* The response a stream carries: the one in its response.completed event. */
function streamed(r) {
    const events = h.parseSSE(r.text);
    const done = events.filter((e) => e.event === 'response.completed');
    assert.equal(done.length, 1, 'one response.completed event');
    return {events, response: JSON.parse(done[0].data).response};
}

/* Rebuild the text of a stream from its deltas, as a client printing them would. */
function deltaText(events) {
    return events.filter((e) => e.event === 'response.output_text.delta')
        .map((e) => JSON.parse(e.data).delta).join('');
}

h.test('JSON twice: the second is a HIT with the same response and request id', async () => {
    const b = body(h.uniq('responses json'), {instructions: 'Be brief.'});
    const calls = env.mock.callCount(RESP);
    const a = await env.proxy.post(RESP, b);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.cache, 'MISS');
    assert.equal(a.json.object, 'response');
    const hit = await env.proxy.post(RESP, b);
    assert.equal(hit.cache, 'HIT');
    assert.equal(hit.text, a.text, 'the same bytes');
    assert.equal(hit.headers['x-request-id'], a.headers['x-request-id']);
    assert.equal(env.mock.callCount(RESP), calls + 1);
    const s = await env.proxy.stats();
    assert.ok(s.tokens_saved_prompt >= a.json.usage.input_tokens, 'usage read from input_tokens');
});

h.test('a streamed answer serves a JSON client, and a JSON answer a stream client', async () => {
    const q = h.uniq('responses both ways');
    const live = await env.proxy.post(RESP, body(q, {stream: true}));
    assert.equal(live.cache, 'MISS');
    assert.match(live.headers['content-type'], /text\/event-stream/);
    const miss = streamed(live);
    const json = await env.proxy.post(RESP, body(q));
    assert.equal(json.cache, 'HIT');
    assert.deepEqual(json.json, miss.response, 'the JSON answer is the stream\'s final response');

    const q2 = h.uniq('responses json then stream');
    const first = await env.proxy.post(RESP, body(q2));
    assert.equal(first.cache, 'MISS');
    const synth = await env.proxy.post(RESP, body(q2, {stream: true}));
    assert.equal(synth.cache, 'HIT');
    assert.match(synth.headers['content-type'], /text\/event-stream/);
    const s = streamed(synth);
    assert.deepEqual(s.response, first.json);
    assert.equal(deltaText(s.events), text(first.json), 'the deltas spell the text');
    assert.equal(s.events[0].event, 'response.created');
    assert.equal(JSON.parse(s.events[0].data).response.status, 'in_progress');
    const seqs = s.events.map((e) => JSON.parse(e.data).sequence_number);
    assert.deepEqual(seqs, seqs.map((_, i) => i), 'sequence numbers count from 0');
});

h.test('a streamed answer replays event for event to a stream client', async () => {
    const b = body(h.uniq('responses replay'), {stream: true, tools: [{type: 'function', name: 'get_weather',
        parameters: {type: 'object', properties: {city: {type: 'string'}}}}]});
    const a = await env.proxy.post(RESP, b);
    const hit = await env.proxy.post(RESP, b);
    assert.equal(hit.cache, 'HIT');
    assert.deepEqual(h.parseSSE(hit.text), h.parseSSE(a.text));
    const call = streamed(hit).response.output[0];
    assert.equal(call.type, 'function_call');
    assert.equal(call.name, 'get_weather');
});

h.test('instructions, input items, tools, reasoning, previous_response_id and store are in the key', async () => {
    const q = h.uniq('responses key');
    const base = body([{role: 'user', content: [{type: 'input_text', text: q}]}]);
    const variants = [
        {instructions: 'Answer in French.'},
        {input: [{role: 'developer', content: 'terse'}, ...base.input]},
        {tools: [{type: 'function', name: 'f', parameters: {type: 'object', properties: {}}}]},
        {reasoning: {effort: 'high'}},
        {store: false},
        {user: 'end-user-7'},
        {metadata: {run: '7'}},
    ];
    const first = await env.proxy.post(RESP, base);
    assert.equal(first.cache, 'MISS');
    for (const v of variants) {
        const r = await env.proxy.post(RESP, {...base, ...v});
        assert.equal(r.status, 200, r.text);
        assert.equal(r.cache, 'MISS', `${JSON.stringify(v)} must not share the entry`);
    }
    /* stream and stream_options are delivery only. */
    const again = await env.proxy.post(RESP, {...base, stream: true, stream_options: {include_obfuscation: false}});
    assert.equal(again.cache, 'HIT');
    const chained = body(h.uniq('follow-up'), {previous_response_id: first.json.id});
    const c1 = await env.proxy.post(RESP, chained);
    assert.equal(c1.status, 200, c1.text);
    const c2 = await env.proxy.post(RESP, chained);
    assert.equal(c2.cache, 'HIT');
    const other = await env.proxy.post(RESP, {...chained, previous_response_id: c1.json.id});
    assert.equal(other.cache, 'MISS');
});

h.test('background responses and conversations are never cached', async () => {
    const bg = body(h.uniq('background'), {background: true});
    const calls = env.mock.callCount(RESP);
    const a = await env.proxy.post(RESP, bg);
    assert.equal(a.status, 200);
    assert.equal(a.json.status, 'queued');
    assert.equal(a.cache, 'BYPASS');
    const b = await env.proxy.post(RESP, bg);
    assert.equal(b.cache, 'BYPASS');
    const conv = body(h.uniq('conversation'), {conversation: 'conv_mock1'});
    assert.equal((await env.proxy.post(RESP, conv)).cache, 'BYPASS');
    assert.equal((await env.proxy.post(RESP, conv)).cache, 'BYPASS');
    assert.equal(env.mock.callCount(RESP), calls + 4);
    const s = await env.proxy.stats();
    assert.ok(s.requests_uncacheable >= 4);
});

h.test('a tool run in a named container is never cached; a new container is', async () => {
    const calls = env.mock.callCount(RESP);
    const named = body(h.uniq('code in cntr'), {tools: [{type: 'code_interpreter', container: 'cntr_abc'}]});
    assert.equal((await env.proxy.post(RESP, named)).cache, 'BYPASS');
    assert.equal((await env.proxy.post(RESP, named)).cache, 'BYPASS');
    assert.equal(env.mock.callCount(RESP), calls + 2);
    const auto = body(h.uniq('code in auto'), {tools: [{type: 'code_interpreter', container: {type: 'auto'}}]});
    assert.equal((await env.proxy.post(RESP, auto)).cache, 'MISS');
    assert.equal((await env.proxy.post(RESP, auto)).cache, 'HIT');
});

h.test('a queued or failed response sent with 200 is relayed but not stored', async () => {
    const b = body(h.uniq('odd 200'));
    const odd = JSON.stringify({id: 'resp_x', object: 'response', status: 'failed', output: [],
        error: {code: 'server_error', message: 'boom'}});
    const a = await env.proxy.post(RESP, b, {'x-mock-body': odd});
    assert.equal(a.status, 200);
    const again = await env.proxy.post(RESP, b);
    assert.equal(again.cache, 'MISS');
});

h.test('a cached response id resolves for its tenant; an expired one gets the provider\'s 404', async () => {
    const alice = h.bearer('sk-alice-responses');
    const q = h.uniq('tenant ids');
    const first = await env.proxy.post(RESP, body(q), alice);
    const hit = await env.proxy.post(RESP, body(q), alice);
    assert.equal(hit.cache, 'HIT');
    assert.equal(hit.json.id, first.json.id);
    /* The id served from the cache is chained on at the provider, by the same tenant. */
    const next = await env.proxy.post(RESP, body(h.uniq('next turn'), {previous_response_id: hit.json.id}), alice);
    assert.equal(next.status, 200, next.text);
    /* Another tenant never gets alice's entry (it could not chain on its id). */
    const bob = await env.proxy.post(RESP, body(q), h.bearer('sk-bob-responses'));
    assert.equal(bob.cache, 'MISS');
    assert.notEqual(bob.json.id, first.json.id);
    /* Not even in a shared namespace: a stored response belongs to its owner. */
    const ns = {'X-Cache-Namespace': 'public'};
    const q2 = h.uniq('shared ns');
    await env.proxy.post(RESP, body(q2), {...alice, ...ns});
    assert.equal((await env.proxy.post(RESP, body(q2), {...h.bearer('sk-bob-responses'), ...ns})).cache, 'MISS');
    /* With store: false nothing is kept upstream, so the namespace may share it. */
    const q3 = h.uniq('shared unstored');
    await env.proxy.post(RESP, body(q3, {store: false}), {...alice, ...ns});
    assert.equal((await env.proxy.post(RESP, body(q3, {store: false}),
        {...h.bearer('sk-bob-responses'), ...ns})).cache, 'HIT');
    /* The provider's retention ended: a follow-up that misses gets its 404, never cached. */
    env.mock.forgetResponse(first.json.id);
    const late = body(h.uniq('too late'), {previous_response_id: first.json.id});
    const gone = await env.proxy.post(RESP, late, alice);
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'previous_response_not_found');
    assert.equal((await env.proxy.post(RESP, late, alice)).cache, 'MISS');
});

h.test('a follow-up on a stored response is never shared through a shared namespace', async () => {
    /*
     * store: false keeps nothing new upstream, but previous_response_id reads what the
     * owner's account keeps: another tenant's call is refused by the provider, so it must
     * never be answered with the owner's continuation from the namespace.
     */
    const alice = h.bearer('sk-alice-follow-up');
    const bob = h.bearer('sk-bob-follow-up');
    const ns = {'X-Cache-Namespace': 'public'};
    const first = await env.proxy.post(RESP, body(h.uniq('my secret is tulip')), alice);
    assert.equal(first.status, 200, first.text);
    const follow = body(h.uniq('what is my secret?'), {previous_response_id: first.json.id, store: false});
    const a = await env.proxy.post(RESP, follow, {...alice, ...ns});
    assert.equal(a.status, 200, a.text);
    assert.equal((await env.proxy.post(RESP, follow, {...alice, ...ns})).cache, 'HIT', 'its owner hits');
    const b = await env.proxy.post(RESP, follow, {...bob, ...ns});
    assert.notEqual(b.cache, 'HIT', 'bob was served alice\'s continuation');
    assert.equal(b.status, 404, b.text);
    assert.equal(b.json.error.code, 'previous_response_not_found');
    /* A stored prompt belongs to its project too. */
    const prompted = body(h.uniq('prompted'), {prompt: {id: 'pmpt_alice_only', version: '2'}, store: false});
    await env.proxy.post(RESP, prompted, {...alice, ...ns});
    assert.equal((await env.proxy.post(RESP, prompted, {...bob, ...ns})).cache, 'MISS');
    /* So does a file named by its id. */
    const filed = body([{role: 'user', content: [{type: 'input_file', file_id: 'file-alice-only'},
        {type: 'input_text', text: h.uniq('summarise the file')}]}], {store: false});
    await env.proxy.post(RESP, filed, {...alice, ...ns});
    assert.equal((await env.proxy.post(RESP, filed, {...bob, ...ns})).cache, 'MISS');
    /* A self-contained unstored request is still shared there. */
    const plain = body(h.uniq('plain unstored'), {store: false});
    await env.proxy.post(RESP, plain, {...alice, ...ns});
    assert.equal((await env.proxy.post(RESP, plain, {...bob, ...ns})).cache, 'HIT');
});

h.test('every input shape the API accepts is cached; a bad input is a 400', async () => {
    /* Matching by meaning on the input's last user message: semantic.test.js. */
    for (const input of [h.uniq('plain string'),
        [{role: 'user', content: h.uniq('item string')}],
        [{type: 'message', role: 'user', content: [{type: 'input_text', text: h.uniq('item parts')}]}],
        [{type: 'function_call_output', call_id: 'call_1', output: '{"t":20}'}]]) {
        const r = await env.proxy.post(RESP, body(input));
        assert.equal(r.status, 200, r.text);
        assert.equal((await env.proxy.post(RESP, body(input))).cache, 'HIT');
    }
    const noInput = await env.proxy.post(RESP, {model: 'gpt-4.1-mini', instructions: 'Say hi.'});
    assert.equal(noInput.status, 200, 'input may be absent');
    const bad = await env.proxy.post(RESP, {model: 'gpt-4.1-mini', input: 42});
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /input/);
});
