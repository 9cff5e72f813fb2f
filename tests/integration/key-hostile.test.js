'use strict';
/*
 * Inputs that change the answer but used to leave the exact key or the
 * semantic partition alike, so that one request was served another's answer:
 * a multi-line question laid out otherwise (the embedder folds line breaks),
 * an upload named through a JSON escape ("file\u005fid") in a shared
 * namespace, a key header spelled with '_' for '-'.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

let sem = null;

const tag = () => h.uniq('t').split(' ')[1]; /* a word that keeps tests apart */

function semArgs() {
    /* guards off: the partition is what is tested, not what a guard may catch after it */
    return ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai', '--embedder-url', sem.url,
        '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9', '--semantic-guards', 'none'];
}

h.test('set up: mock embedder', async () => {
    sem = await createSemanticMock().listen();
});

h.test('a multi-line question is matched by meaning only by one of the same line layout', async () => {
    /*
     * The mock embeds a bag of words, as text normalisation does layout: each pair below
     * embeds alike (similarity 1) though the code, or the poem's lines, differ. They used
     * to share a partition, so the second was served the first's answer.
     */
    const p = await env.startProxy({args: semArgs()});
    const t = tag();
    const ns = {'X-Cache-Namespace': t};
    const code = `def total_${t}(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s`;
    const miss = await p.post(CHAT, h.chatBody(code), ns);
    assert.equal(miss.cache, 'MISS', miss.text);
    /* once its vector is searchable: the same words and layout, reworded, hit by meaning */
    const same = `def total_${t}(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s  `;
    await h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(same), {...ns, 'Cache-Control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic', `${r.cache}: not yet searchable`);
    });
    const others = [
        /* the return inside the loop: another program, same words */
        `def total_${t}(xs):\n    s = 0\n    for x in xs:\n        s += x\n        return s`,
        /* tabs for spaces */
        `def total_${t}(xs):\n\ts = 0\n\tfor x in xs:\n\t\ts += x\n\treturn s`,
        /* one line */
        `def total_${t}(xs): s = 0 for x in xs: s += x return s`,
    ];
    for (const text of others) {
        const r = await p.post(CHAT, h.chatBody(text), {...ns, 'Cache-Control': 'no-store'});
        assert.equal(r.status, 200, r.text);
        assert.equal(r.cache, 'MISS', `served ${JSON.stringify(code)}'s answer to ${JSON.stringify(text)}`);
    }
    /* a poem's lines, and the same words on one line */
    const poem = `roses are red ${t}\nviolets are blue`;
    assert.equal((await p.post(CHAT, h.chatBody(poem), ns)).cache, 'MISS');
    await h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(`${poem} `), {...ns, 'Cache-Control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic', `${r.cache}: not yet searchable`);
    });
    const flat = await p.post(CHAT, h.chatBody(`roses are red ${t} violets are blue`), {...ns, 'Cache-Control': 'no-store'});
    assert.equal(flat.cache, 'MISS', 'the one-line question got the two-line one\'s answer');
    /* one-line questions still match one-line rewordings */
    const q = `how do I sort a list ${t} in python`;
    assert.equal((await p.post(CHAT, h.chatBody(q), ns)).cache, 'MISS');
    await h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(`in python ${t}, how do I sort a list`), {...ns, 'Cache-Control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic', `${r.cache}: not yet searchable`);
    });
    assert.equal(await p.stop(), 0);
});

/* body's JSON text with every "name" member spelled with \u005f for its '_'. */
function escapedName(body, name) {
    const text = JSON.stringify(body);
    const spelled = JSON.stringify(name).replace('_', '\\u005f');
    assert.ok(text.includes(JSON.stringify(name)));
    return text.split(JSON.stringify(name)).join(spelled);
}

h.test('in a shared namespace, an upload named through a JSON escape stays with its credential', async () => {
    /*
     * "file\u005fid" is "file_id" to every JSON parser: the provider resolves Alice's file
     * for Alice only. The check read the raw text for "file_id", so Bob was served Alice's
     * answer about her file from the shared namespace.
     */
    const proxy = await env.startProxy({args: ['--shared-namespaces', 'public']});
    const ns = {'X-Cache-Namespace': 'public'};
    const alice = {...h.bearer('sk-escaped-alice'), ...ns};
    const bob = {...h.bearer('sk-escaped-bob'), ...ns};
    const chat = h.chatBody(h.uniq('summarise'));
    chat.messages[1].content = [{type: 'text', text: h.uniq('summarise this file')},
        {type: 'file', file: {file_id: 'file-alice-only'}}];
    const doc = h.messagesBody(h.uniq('summarise'));
    doc.messages[0].content = [{type: 'document', source: {type: 'file', file_id: 'file_alice_only'}},
        {type: 'text', text: h.uniq('summarise this document')}];
    const skill = h.messagesBody(h.uniq('make the quarterly deck'));
    skill.container = {skills: [{type: 'custom', skill_id: 'skill_01AliceOnly', version: 'latest'}]};
    for (const [p, raw] of [[CHAT, escapedName(chat, 'file_id')], [MESSAGES, escapedName(doc, 'file_id')],
        [MESSAGES, escapedName(skill, 'skill_id')]]) {
        assert.equal((await proxy.post(p, raw, alice)).status, 200);
        h.assertHit(await proxy.post(p, raw, alice));
        const b = await proxy.post(p, raw, bob);
        assert.equal(b.status, 200, b.text);
        assert.equal(b.cache, 'MISS', `${p}: bob got alice's answer (${raw})`);
    }
    /* an escape that names nothing of the account's is shared as before */
    const plain = JSON.stringify(h.chatBody(`${h.uniq('shared question')} caf\u00e9`)).replace('\u00e9', '\\u00e9');
    assert.equal((await proxy.post(CHAT, plain, alice)).cache, 'MISS');
    h.assertHit(await proxy.post(CHAT, plain, bob));
    h.assertHit(await proxy.post(CHAT, plain, bob));
    assert.equal(await proxy.stop(), 0);
});

h.test('a key header spelled with _ for - is in the key', async () => {
    /*
     * Upstreams behind a CGI or WSGI gateway read "OpenAI_Organization" as the organization
     * header. The key compared names exactly, so the answer fetched without the header (or
     * for another organization) was served to a request that selected org-b this way.
     */
    const p = await env.startProxy();
    const body = h.chatBody(h.uniq('underscore org'));
    assert.equal((await p.post(CHAT, body)).cache, 'MISS');
    const under = await p.post(CHAT, body, {'OpenAI_Organization': 'org-b'});
    assert.equal(under.status, 200, under.text);
    assert.equal(under.cache, 'MISS', 'served the answer fetched without the organization');
    assert.equal(env.mock.requests[env.mock.requests.length - 1].headers['openai_organization'], 'org-b',
        'the header went upstream');
    h.assertHit(await p.post(CHAT, body, {'openai_organization': 'org-b'}));
    /* hyphen and underscore spellings are not one key: only some upstreams read the latter */
    assert.equal((await p.post(CHAT, body, {'OpenAI-Organization': 'org-b'})).cache, 'MISS');
    h.assertHit(await p.post(CHAT, body));
    assert.equal(await p.stop(), 0);
});

h.test('tear down: mock embedder', async () => {
    await sem.close();
});
