'use strict';
/*
 * Tenant separation: every cache key includes a hash of the client's
 * credential (Authorization: Bearer, x-api-key or api-key), so a client never
 * receives an answer cached for another credential.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

h.test('same Authorization hits, another Authorization misses', async () => {
    const body = h.chatBody(h.uniq('tenant bearer'));
    const a1 = await env.proxy.post(CHAT, body, h.bearer('sk-tenant-a'));
    h.assertFromUpstream(a1, env.mock);
    const a2 = await env.proxy.post(CHAT, body, h.bearer('sk-tenant-a'));
    h.assertHit(a2);

    const b1 = await env.proxy.post(CHAT, body, h.bearer('sk-tenant-b'));
    h.assertFromUpstream(b1, env.mock);
    assert.notEqual(h.answerSeq(h.chatText(b1.json)), h.answerSeq(h.chatText(a1.json)),
        'tenant b got its own answer');
    const b2 = await env.proxy.post(CHAT, body, h.bearer('sk-tenant-b'));
    h.assertHit(b2);
    assert.equal(h.chatText(b2.json), h.chatText(b1.json));
});

h.test('same x-api-key hits, another x-api-key misses', async () => {
    const body = h.messagesBody(h.uniq('tenant x-api-key'));
    const a1 = await env.proxy.post(MESSAGES, body, h.apiKey('sk-ant-tenant-a'));
    h.assertFromUpstream(a1, env.mock);
    h.assertHit(await env.proxy.post(MESSAGES, body, h.apiKey('sk-ant-tenant-a')));
    const b1 = await env.proxy.post(MESSAGES, body, h.apiKey('sk-ant-tenant-b'));
    h.assertFromUpstream(b1, env.mock);
    assert.notEqual(h.messageText(b1.json), h.messageText(a1.json));
});

h.test('api-key (Azure style) separates tenants too', async () => {
    const body = h.chatBody(h.uniq('tenant api-key'));
    await env.proxy.post(CHAT, body, {'api-key': 'azure-key-a'});
    h.assertHit(await env.proxy.post(CHAT, body, {'api-key': 'azure-key-a'}));
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {'api-key': 'azure-key-b'}), env.mock);
});

h.test('an anonymous client does not share entries with a credentialed one', async () => {
    const body = h.chatBody(h.uniq('tenant anonymous'));
    await env.proxy.post(CHAT, body, h.bearer('sk-tenant-c'));
    const anon = await env.proxy.post(CHAT, body, {authorization: undefined});
    h.assertFromUpstream(anon, env.mock);
    h.assertHit(await env.proxy.post(CHAT, body, {authorization: undefined}));
});

h.test('a credential differing only in case is another tenant', async () => {
    const body = h.chatBody(h.uniq('tenant case'));
    await env.proxy.post(CHAT, body, h.bearer('sk-Case-Key'));
    h.assertFromUpstream(await env.proxy.post(CHAT, body, h.bearer('sk-case-key')), env.mock);
});

h.test('two credential headers make a tenant of their own; a key spoofed in another header does not reach its entries', async () => {
    const body = h.chatBody(h.uniq('tenant two headers'));
    const victim = h.bearer('sk-tenant-victim');
    h.assertFromUpstream(await env.proxy.post(CHAT, body, victim), env.mock);
    h.assertHit(await env.proxy.post(CHAT, body, victim));
    /* the victim's key in another credential header, or beside another key, is another tenant */
    for (const spoof of [{'x-api-key': 'sk-tenant-victim'}, {'api-key': 'Bearer sk-tenant-victim'},
        {...victim, 'x-api-key': 'sk-tenant-attacker'},
        {authorization: 'Bearer sk-tenant-victim', 'X-Cache-Namespace': 'private-ns'}]) {
        const r = await env.proxy.post(CHAT, body, spoof);
        assert.equal(r.status, 200, r.text);
        assert.notEqual(r.cache, 'HIT', `served the victim's entry to ${JSON.stringify(Object.keys(spoof))}`);
    }
    /* header names are not case-sensitive, and white space around a value is not the value's */
    h.assertHit(await env.proxy.post(CHAT, body, {AUTHORIZATION: 'Bearer sk-tenant-victim'}));
    h.assertHit(await env.proxy.post(CHAT, body, {authorization: 'Bearer sk-tenant-victim  '}));
});

h.test('in a shared namespace, a request naming a file by its id stays with its credential', async () => {
    /*
     * A file id resolves only for the account that uploaded it: another account's identical
     * call is refused by the provider, so it must not get the owner's answer from the
     * namespace. Requests without one are shared there as before.
     */
    const proxy = await env.startProxy({args: ['--shared-namespaces', 'public']});
    const ns = {'X-Cache-Namespace': 'public'};
    const alice = {...h.bearer('sk-files-alice'), ...ns};
    const bob = {...h.bearer('sk-files-bob'), ...ns};
    const chat = h.chatBody(h.uniq('summarise'));
    chat.messages[1].content = [{type: 'text', text: h.uniq('summarise this file')},
        {type: 'file', file: {file_id: 'file-alice-only'}}];
    const doc = h.messagesBody(h.uniq('summarise'));
    doc.messages[0].content = [{type: 'document', source: {type: 'file', file_id: 'file_alice_only'}},
        {type: 'text', text: h.uniq('summarise this document')}];
    /* a custom skill is the account's upload too (Messages container skills) */
    const skill = h.messagesBody(h.uniq('make the quarterly deck'));
    skill.container = {skills: [{type: 'custom', skill_id: 'skill_01AliceOnly', version: 'latest'}]};
    for (const [p, b] of [[CHAT, chat], [MESSAGES, doc], [MESSAGES, skill]]) {
        assert.equal((await proxy.post(p, b, alice)).status, 200);
        h.assertHit(await proxy.post(p, b, alice));
        assert.equal((await proxy.post(p, b, bob)).cache, 'MISS', `${p}: bob got alice's answer`);
    }
    const plain = h.chatBody(h.uniq('shared question'));
    await proxy.post(CHAT, plain, alice);
    h.assertHit(await proxy.post(CHAT, plain, bob));
    assert.equal(await proxy.stop(), 0);
});
