'use strict';
/*
 * cache-key-headers: request headers that change the answer are part of the
 * key. By default OpenAI's organization and project are among them, so an
 * answer fetched for one organization never serves a request of another (or
 * one without the header); the list is configurable.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();
const CHAT = '/v1/chat/completions';

h.test('OpenAI-Organization and OpenAI-Project are in the key by default', async () => {
    const body = h.chatBody(h.uniq('org scoped'));
    const orgA = {'OpenAI-Organization': 'org-a'};
    assert.equal((await env.proxy.post(CHAT, body, orgA)).headers['x-cache-status'], 'MISS');
    h.assertHit(await env.proxy.post(CHAT, body, {'openai-organization': 'org-a'}));
    assert.equal((await env.proxy.post(CHAT, body, {'OpenAI-Organization': 'org-b'})).headers['x-cache-status'], 'MISS');
    assert.equal((await env.proxy.post(CHAT, body)).headers['x-cache-status'], 'MISS', 'no header: not org-a\'s entry');
    assert.equal((await env.proxy.post(CHAT, body, {...orgA, 'OpenAI-Project': 'proj-1'})).headers['x-cache-status'], 'MISS');
    /* Headers outside the list still go upstream but do not split entries. */
    h.assertHit(await env.proxy.post(CHAT, body, {...orgA, 'X-Stainless-Lang': 'python'}));
    assert.equal(env.mock.requests[env.mock.requests.length - 1].headers['openai-organization'], 'org-a');
});

h.test('the list is configurable', async () => {
    const p = await env.startProxy({args: ['--cache-key-headers', 'x-team']});
    const body = h.chatBody(h.uniq('team scoped'));
    assert.equal((await p.post(CHAT, body, {'X-Team': 'red'})).headers['x-cache-status'], 'MISS');
    assert.equal((await p.post(CHAT, body, {'X-Team': 'blue'})).headers['x-cache-status'], 'MISS');
    h.assertHit(await p.post(CHAT, body, {'X-Team': 'red', 'OpenAI-Organization': 'org-z'}));
    await p.stop();
    /* A list replaces the defaults (doc/configuration.md): kept only when listed again. */
    const both = await env.startProxy({args: ['anthropic-version', 'anthropic-beta', 'openai-beta',
        'openai-organization', 'openai-project', 'x-team'].flatMap((v) => ['--cache-key-headers', v])});
    const msg = h.messagesBody(h.uniq('beta scoped'));
    assert.equal((await both.post('/v1/messages', msg, {'X-Team': 'red'})).headers['x-cache-status'], 'MISS');
    assert.equal((await both.post('/v1/messages', msg, {'X-Team': 'red', 'anthropic-beta': 'context-1m-2025-08-07'}))
        .headers['x-cache-status'], 'MISS');
    await both.stop();
    /* (One option may list several, as its line of the file does: 'a b' is two names.) */
    const bad = await h.runCli(['-t', '--cache-key-headers', 'not/a/header']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.output, /cache-key-headers: "not\/a\/header" is not a header name/);
});

h.test('a key header the client names in Connection is not the upstream\'s, nor the key\'s', async () => {
    /*
     * Connection's tokens name hop-by-hop headers, which the proxy does not forward: the
     * upstream answered without the header, so that answer must not serve a request that
     * sends it (it did: the key took the header in all the same).
     */
    const body = h.chatBody(h.uniq('hop by hop org'));
    const hop = await env.proxy.post(CHAT, body,
        {'OpenAI-Organization': 'org-hop', Connection: 'keep-alive, OpenAI-Organization'});
    assert.equal(hop.status, 200, hop.text);
    assert.equal(env.mock.requests[env.mock.requests.length - 1].headers['openai-organization'], undefined,
        'the header went upstream');
    const org = await env.proxy.post(CHAT, body, {'OpenAI-Organization': 'org-hop'});
    assert.equal(org.headers['x-cache-status'], 'MISS', 'served the answer made without the organization');
    assert.equal(env.mock.requests[env.mock.requests.length - 1].headers['openai-organization'], 'org-hop');
    /* what the upstream saw is the key: the body without the header */
    h.assertHit(await env.proxy.post(CHAT, body));
});
