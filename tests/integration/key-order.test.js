'use strict';
/*
 * Member order where the upstream reads it: a JSON schema (structured
 * outputs, a tool's parameters) and a tool input in the history are
 * rendered into the prompt as written, and structured outputs are generated
 * in the order of the schema's properties (OpenAI: "outputs will be produced
 * in the same order as the ordering of keys in the schema"). Two requests
 * whose schemas differ only in that order used to share a key, so one was
 * served the answer generated for the other, its members in the other order.
 * The order of the request's own members (top level, a message's role and
 * content) still does not count.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();
const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
const RESPONSES = '/v1/responses';

function schemaOf(names) {
    return {type: 'object', properties: Object.fromEntries(names.map((n) => [n, {type: 'string'}])),
        required: [...names].sort(), additionalProperties: false}; /* only the properties' order differs */
}

function structured(q, names) {
    return h.chatBody(q, {response_format: {type: 'json_schema',
        json_schema: {name: 'verdict', strict: true, schema: schemaOf(names)}}});
}

const memberOrder = (res) => Object.keys(JSON.parse(h.chatText(res.json)));

h.test('structured outputs whose schema orders its properties otherwise are two requests', async () => {
    const q = h.uniq('reason then answer');
    const first = await env.proxy.post(CHAT, structured(q, ['reasoning', 'answer']));
    h.assertFromUpstream(first, env.mock);
    assert.deepEqual(memberOrder(first), ['reasoning', 'answer']);
    const other = await env.proxy.post(CHAT, structured(q, ['answer', 'reasoning']));
    assert.equal(other.headers['x-cache-status'], 'MISS', 'served the answer generated for the other order');
    assert.deepEqual(memberOrder(other), ['answer', 'reasoning']);
    h.assertHit(await env.proxy.post(CHAT, structured(q, ['reasoning', 'answer'])));
    h.assertHit(await env.proxy.post(CHAT, structured(q, ['answer', 'reasoning'])));
});

/*
 * vLLM's guided_json (and structured_outputs, llama.cpp's json_schema) gives the schema as a
 * member of the request itself: its order was left to the top level's rule, sorted.
 */
h.test('a vLLM guided_json schema that orders its properties otherwise is another request', async () => {
    const q = h.uniq('guided order');
    const guided = (names) => h.chatBody(q, {guided_json: schemaOf(names)});
    const first = await env.proxy.post(CHAT, guided(['reasoning', 'answer']));
    h.assertFromUpstream(first, env.mock);
    assert.deepEqual(memberOrder(first), ['reasoning', 'answer']);
    const other = await env.proxy.post(CHAT, guided(['answer', 'reasoning']));
    assert.equal(other.headers['x-cache-status'], 'MISS', 'served the answer generated for the other order');
    assert.deepEqual(memberOrder(other), ['answer', 'reasoning']);
    h.assertHit(await env.proxy.post(CHAT, guided(['reasoning', 'answer'])));
});

h.test('concurrent requests whose schemas differ in order do not share a call', async () => {
    const q = h.uniq('concurrent order');
    const ida = h.uniq('hold').replace(' ', '-'), idb = h.uniq('hold').replace(' ', '-');
    const before = (await env.proxy.stats()).coalesced;
    const a = env.proxy.post(CHAT, structured(q, ['x', 'y']), {'x-mock-hold': ida});
    await env.mock.waitForHold(ida);
    const b = env.proxy.post(CHAT, structured(q, ['y', 'x']), {'x-mock-hold': idb});
    /* b either makes its own call (held too) or joins a's: whichever comes */
    await h.waitFor(async () => env.mock.isHolding(idb) || (await env.proxy.stats()).coalesced > before,
        {what: 'the second request in flight'});
    env.mock.release(ida);
    env.mock.release(idb);
    const [ra, rb] = await Promise.all([a, b]);
    assert.deepEqual(memberOrder(ra), ['x', 'y']);
    assert.deepEqual(memberOrder(rb), ['y', 'x'], 'got the answer of the call made for the other order');
    assert.equal((await env.proxy.stats()).coalesced, before);
});

h.test('tool schemas and tool inputs keep their order in the key; the request\'s own members do not', async () => {
    const q = h.uniq('tool order');
    const tool = (names) => ({type: 'function', function: {name: 'f', parameters: schemaOf(names)}});
    const chat = (names) => h.chatBody(q, {tools: [tool(names)]});
    h.assertFromUpstream(await env.proxy.post(CHAT, chat(['a', 'b'])), env.mock);
    assert.equal((await env.proxy.post(CHAT, chat(['b', 'a']))).headers['x-cache-status'], 'MISS');
    /* top-level members, a message's and a tool definition's own members: any order */
    const body = chat(['a', 'b']);
    const msgs = body.messages.map((m) => `{"content":${JSON.stringify(m.content)},"role":"${m.role}"}`).join(',');
    const reordered = `{"tools":[{"function":{"parameters":${JSON.stringify(body.tools[0].function.parameters)},` +
        `"name":"f"},"type":"function"}],"messages":[${msgs}],"model":${JSON.stringify(body.model)}}`;
    assert.deepEqual(JSON.parse(reordered), body);
    h.assertHit(await env.proxy.post(CHAT, reordered));

    const an = (names) => h.messagesBody(q, {tools: [{name: 'f', input_schema: schemaOf(names)}]});
    h.assertFromUpstream(await env.proxy.post(MESSAGES, an(['a', 'b'])), env.mock);
    assert.equal((await env.proxy.post(MESSAGES, an(['b', 'a']))).headers['x-cache-status'], 'MISS');

    const history = (input) => ({model: 'claude-3-5-haiku-latest', max_tokens: 64, messages: [
        {role: 'user', content: q},
        {role: 'assistant', content: [{type: 'tool_use', id: 'toolu_1', name: 'f', input}]},
        {role: 'user', content: [{type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok'}]}]});
    h.assertFromUpstream(await env.proxy.post(MESSAGES, history({a: 1, b: 2})), env.mock);
    assert.equal((await env.proxy.post(MESSAGES, history({b: 2, a: 1}))).headers['x-cache-status'], 'MISS');

    const resp = (names) => ({model: 'gpt-4o-mini', input: q,
        text: {format: {type: 'json_schema', name: 'v', strict: true, schema: schemaOf(names)}}});
    h.assertFromUpstream(await env.proxy.post(RESPONSES, resp(['a', 'b'])), env.mock);
    assert.equal((await env.proxy.post(RESPONSES, resp(['b', 'a']))).headers['x-cache-status'], 'MISS');
});
