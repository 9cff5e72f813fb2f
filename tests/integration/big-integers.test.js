'use strict';
/*
 * Integers the upstream reads exactly but an IEEE double cannot hold must not
 * share a cache entry: seeds 9007199254740992 (2^53) and 9007199254740993 read
 * as the same double, and used to give MISS then HIT - the second caller got
 * an answer generated for another seed. Number spellings of one double
 * (1, 1.0, 1e0) still share one as a parameter (top-level member); inside
 * the body (a tool's schema, a tool input) an integer and a float of one
 * value are two requests: the upstream reads them apart and writes them
 * into the prompt as they are.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';

/* The body as raw JSON text, so the digits are sent as written (JS numbers would round them). */
function withSeed(prompt, seedLiteral) {
    const body = JSON.stringify(h.chatBody(prompt));
    return body.slice(0, -1) + `,"seed":${seedLiteral}}`;
}

h.test('seeds 2^53 and 2^53 + 1 never share an entry', async () => {
    const prompt = h.uniq('big seed');
    const pairs = [
        ['9007199254740992', '9007199254740993'],
        ['-9007199254740993', '-9007199254740992'],
        ['123456789012345678901234567890', '123456789012345678901234567891'],
    ];
    for (const [a, b] of pairs) {
        const calls = env.mock.callCount();
        const first = await env.proxy.post(CHAT, withSeed(prompt, a));
        assert.equal(first.status, 200, first.text);
        const second = await env.proxy.post(CHAT, withSeed(prompt, b));
        assert.equal(second.status, 200, second.text);
        assert.notEqual(second.cache, 'HIT', `seed ${b} was answered with the entry of seed ${a}`);
        assert.equal(env.mock.callCount(), calls + 2, 'both went upstream');
        assert.ok(String(env.mock.requests.slice(-1)[0].rawBody).includes(`"seed":${b}`),
            'the upstream got every digit');
    }
});

h.test('spellings of one exactly representable number still share an entry', async () => {
    const prompt = h.uniq('small seed');
    const first = await env.proxy.post(CHAT, withSeed(prompt, '42'));
    assert.equal(first.cache, 'MISS');
    h.assertHit(await env.proxy.post(CHAT, withSeed(prompt, '42.0')));
    h.assertHit(await env.proxy.post(CHAT, withSeed(prompt, '4.2e1')));
});

h.test('a big integer request is cached under every digit it has', async () => {
    const prompt = h.uniq('big seed cached');
    const first = await env.proxy.post(CHAT, withSeed(prompt, '9007199254740993'));
    assert.equal(first.cache, 'MISS');
    const again = await env.proxy.post(CHAT, withSeed(prompt, '9007199254740993'));
    h.assertHit(again);
    assert.deepEqual(again.json, first.json);
    const other = await env.proxy.post(CHAT, withSeed(prompt, '9007199254740992'));
    assert.equal(other.cache, 'MISS');
});

/* A body with a tool whose schema default is the literal d, as raw JSON text. */
function withDefault(prompt, d) {
    const body = JSON.stringify({...h.chatBody(prompt), tools: [{type: 'function', function: {name: 'f',
        parameters: {type: 'object', properties: {x: {type: 'number', default: 0}}}}}]});
    return body.replace('"default":0', `"default":${d}`);
}

h.test('an integer and a float of one value inside the body never share an entry', async () => {
    const pairs = [['1', '1.0'], ['100000000000000000000', '1e20'], ['9007199254740992', '9007199254740992.0']];
    for (const [a, b] of pairs) {
        const prompt = h.uniq('schema default');
        const first = await env.proxy.post(CHAT, withDefault(prompt, a));
        assert.equal(first.cache, 'MISS');
        const second = await env.proxy.post(CHAT, withDefault(prompt, b));
        assert.equal(second.status, 200, second.text);
        assert.equal(second.cache, 'MISS', `default ${b} was answered with the entry of default ${a}`);
        assert.ok(String(env.mock.requests.slice(-1)[0].rawBody).includes(`"default":${b}`));
        h.assertHit(await env.proxy.post(CHAT, withDefault(prompt, b)));
    }
    const prompt = h.uniq('schema float spellings');
    assert.equal((await env.proxy.post(CHAT, withDefault(prompt, '2.0'))).cache, 'MISS');
    h.assertHit(await env.proxy.post(CHAT, withDefault(prompt, '2e0')));
});
