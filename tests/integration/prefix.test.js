'use strict';
/*
 * Prefix reuse: routing prefix sends a conversation to the replica that holds
 * its prefix (mock vLLM replicas with a real prefix cache report the cached
 * tokens), spreads new conversations, passes over a busy or dead replica,
 * and two proxy instances sharing Redis agree. Hints per upstream type reach
 * the upstream (cache_salt per tenant, routing headers, prompt_cache_key,
 * Anthropic cache_control on a prefix seen before) without touching what the
 * client set; streams ask for usage and the client that did not ask never
 * sees it.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {startVllmMock} = require('../mock/vllm');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
const NO_STORE = {'cache-control': 'no-store'};

const replicaName = (m) => `127.0.0.1:${m.port}`;

/* A conversation of n user turns: a long first question, short turns after. */
function conversation(topic, n, model = 'mock-vllm') {
    const messages = [{role: 'user', content: `${topic}: ${'context '.repeat(600)}`}];
    for (let i = 1; i < n; i++)
        messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `${topic} follow-up ${i}`});
    return {model, messages, max_tokens: 4};
}

/* Run fn with n mock vLLM replicas, closed afterwards whatever happens. */
async function withPool(n, fn) {
    const reps = [];
    try {
        for (let i = 0; i < n; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        await fn(reps);
    } finally {
        await Promise.all(reps.map((r) => r.close()));
    }
}

function replicaStats(st, mock) {
    return st.replicas.find((x) => x.name === replicaName(mock));
}

h.test('a conversation stays on the replica that holds its prefix, which reports it cached', () => withPool(3, async (reps) => {
    const proxy = await env.startProxy({upstream: reps.map((r) => r.url), workers: 2,
        args: ['--upstream-type', 'vllm']});
    const topic = h.uniq('follow');
    let home = null;
    for (let turn = 1; turn <= 4; turn++) {
        const r = await proxy.post(CHAT, conversation(topic, turn), NO_STORE);
        assert.equal(r.status, 200, r.text);
        home = home || r.headers['x-upstream'];
        assert.equal(r.headers['x-upstream'], home, `turn ${turn}`);
        if (turn > 1)
            assert.ok(r.json.usage.prompt_tokens_details.cached_tokens > 1000,
                `turn ${turn} reuses the prefix: ${JSON.stringify(r.json.usage)}`);
    }
    const st = await proxy.stats();
    assert.equal(st.routing, 'prefix');
    const rep = st.replicas.find((x) => x.name === home);
    assert.equal(rep.requests, 4);
    assert.equal(rep.routed_by_prefix, 3);
    assert.equal(rep.usage_answers, 4);
    assert.ok(rep.predicted_cached_tokens > 3000, JSON.stringify(rep));
    assert.ok(rep.reported_cached_tokens > 3000, JSON.stringify(rep));
    /* The index's prediction is close to what the replica reported. */
    const ratio = rep.predicted_cached_tokens / rep.reported_cached_tokens;
    assert.ok(ratio > 0.8 && ratio < 1.25, `predicted/reported ${ratio}`);
    assert.ok(rep.matched_prefix_tokens >= rep.predicted_cached_tokens);
    const m = await proxy.get('/metrics');
    assert.match(m.text, new RegExp(`promptcache_replica_reported_cached_tokens_total\\{upstream="${home}"\\} \\d+`));
    await proxy.stop();
}));

h.test('new conversations spread over the replicas', () => withPool(3, async (reps) => {
    const proxy = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
        args: ['--upstream-type', 'vllm']});
    const used = new Set();
    for (let i = 0; i < 12; i++) {
        const r = await proxy.post(CHAT, conversation(h.uniq('spread'), 1), NO_STORE);
        assert.equal(r.status, 200, r.text);
        used.add(r.headers['x-upstream']);
    }
    assert.ok(used.size >= 2, `12 new conversations on ${[...used]}`);
    await proxy.stop();
}));

h.test('a busy replica is passed over: the load bound overrules the match', async () => {
    const second = await h.startMock();
    try {
        await busyReplica(second);
    } finally {
        await second.close();
    }
});

async function busyReplica(second) {
    const proxy = await env.startProxy({upstream: [env.mock.url, second.url], workers: 1,
        args: ['--prefix-balance-abs', '1', '--prefix-balance-rel', '1']});
    const topic = h.uniq('busy');
    const first = await proxy.post(CHAT, conversation(topic, 1, 'gpt-4o-mini'), NO_STORE);
    assert.equal(first.status, 200);
    const home = first.headers['x-upstream'];
    const homeMock = home === replicaName(env.mock) ? env.mock : second;
    const body = (seed) => ({...conversation(topic, 2, 'gpt-4o-mini'), seed});
    const held = [];
    for (let i = 0; i < 2; i++) {
        held.push(proxy.post(CHAT, body(i), {...NO_STORE, 'x-mock-hold': `busy-${i}`}));
        await h.waitFor(() => homeMock.isHolding(`busy-${i}`), {what: `held call ${i} on ${home}`});
    }
    /* Two calls in flight there and none on the other: more than 1 beyond it. */
    const r = await proxy.post(CHAT, body(9), NO_STORE);
    assert.equal(r.status, 200);
    assert.notEqual(r.headers['x-upstream'], home);
    const st = await proxy.stats();
    assert.equal(st.replicas.find((x) => x.name === r.headers['x-upstream']).routed_by_balance, 1);
    homeMock.release('busy-0');
    homeMock.release('busy-1');
    for (const p of held)
        assert.equal((await p).status, 200);
    await proxy.stop();
}

h.test('a dead replica is avoided: the conversation moves on without an error', () => withPool(2, async (reps) => {
    const proxy = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
        args: ['--upstream-type', 'vllm']});
    const topic = h.uniq('dead');
    const r1 = await proxy.post(CHAT, conversation(topic, 1), NO_STORE);
    const home = reps.find((m) => replicaName(m) === r1.headers['x-upstream']);
    await home.close();
    const r2 = await proxy.post(CHAT, conversation(topic, 2), NO_STORE);
    assert.equal(r2.status, 200, r2.text);
    assert.notEqual(r2.headers['x-upstream'], replicaName(home));
    const st = await proxy.stats();
    assert.ok(st.upstream_failovers >= 1);
    assert.equal(replicaStats(st, home).healthy, false);
    await proxy.stop();
}));

h.test('a turn its replica refused is not believed held there: once back, the conversation stays where that turn went', () => withPool(2, async (reps) => {
    /*
     * The chain is recorded on a replica as the call is sent; one refused never saw it, yet the
     * index went on saying it held the new turn, as much as the replica that took it: once back,
     * the two tied and half of such conversations went back to the replica lacking that turn.
     */
    const proxy = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
        args: ['--upstream-type', 'vllm', '--upstream-fail-timeout', '0']});
    const topics = [];
    for (let i = 0; i < 6; i++)
        topics.push(h.uniq(`back${i}`));
    const home = {};
    for (const t of topics)
        home[t] = (await proxy.post(CHAT, conversation(t, 1), NO_STORE)).headers['x-upstream'];
    const awayAt = reps.findIndex((m) => replicaName(m) === home[topics[0]]);
    const away = reps[awayAt];
    const awayName = replicaName(away);
    const held = replicaStats(await proxy.stats(), away).index_tokens;
    await away.close();
    for (const t of topics.filter((x) => home[x] === awayName)) {
        const r = await proxy.post(CHAT, conversation(t, 2), NO_STORE);
        assert.equal(r.status, 200, r.text);
        assert.notEqual(r.headers['x-upstream'], awayName);
        home[t] = r.headers['x-upstream'];
    }
    const st = await proxy.stats();
    assert.ok(st.upstream_failovers >= 1);
    assert.equal(replicaStats(st, away).index_tokens, held, 'the refused turns are not held there');
    reps[awayAt] = await startVllmMock({name: 'back', port: away.port, usPerToken: 0, usPerOutputToken: 0});
    for (const t of topics) {
        const r = await proxy.post(CHAT, conversation(t, 3), NO_STORE);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-upstream'], home[t], `${t}: turn 3 where its last turn went`);
    }
    await proxy.stop();
}));

h.test('vllm: cache_salt per tenant and the routing key in x-user-id; the client\'s own kept', () => withPool(1, async (reps) => {
    const proxy = await env.startProxy({upstream: reps[0].url, workers: 1,
        args: ['--upstream-type', 'vllm', '--upstream-dp-size', '2', '--prefix-routing-header', 'x-router-key']});
    const body = conversation(h.uniq('salt'), 1);
    await proxy.post(CHAT, body, {...NO_STORE, ...h.bearer('sk-tenant-one')});
    await proxy.post(CHAT, body, {...NO_STORE, ...h.bearer('sk-tenant-two')});
    await proxy.post(CHAT, {...body, cache_salt: 'clients-salt'},
        {...NO_STORE, ...h.bearer('sk-tenant-one'), 'x-user-id': 'alice'});
    const recs = reps[0].requests().slice(-3);
    const [one, two, own] = recs;
    assert.match(one.fields.cache_salt, /^[0-9a-f]{32}$/);
    assert.match(two.fields.cache_salt, /^[0-9a-f]{32}$/);
    assert.notEqual(one.fields.cache_salt, two.fields.cache_salt, 'tenants never share KV blocks');
    assert.match(one.headers['x-user-id'], /^pc-[0-9a-f]{16}$/);
    assert.equal(one.headers['x-router-key'], one.headers['x-user-id']);
    assert.match(one.headers['x-data-parallel-rank'], /^[01]$/);
    assert.equal(own.fields.cache_salt, 'clients-salt');
    assert.equal(own.headers['x-user-id'], 'alice');
    await proxy.stop();
}));

h.test('sglang: the routing key in x-smg-routing-key, a salt per tenant', () => withPool(1, async (reps) => {
    const proxy = await env.startProxy({upstream: reps[0].url, workers: 1, args: ['--upstream-type', 'sglang']});
    await proxy.post(CHAT, conversation(h.uniq('smg'), 1), NO_STORE);
    const rec = reps[0].requests().slice(-1)[0];
    assert.match(rec.headers['x-smg-routing-key'], /^pc-[0-9a-f]{16}$/);
    assert.equal(rec.headers['x-user-id'], undefined);
    assert.match(rec.fields.cache_salt, /^[0-9a-f]{32}$/);
    await proxy.stop();
}));

h.test('prefix-routing-header naming a header the type sets already: sent once', () => withPool(1, async (reps) => {
    /* vllm with prefix-routing-header x-user-id (or sglang with x-smg-routing-key) sent the
     * header twice, which a router reads as "pc-..., pc-...": a key no other call has. */
    for (const [type, header] of [['vllm', 'X-User-Id'], ['sglang', 'x-smg-routing-key']]) {
        const proxy = await env.startProxy({upstream: reps[0].url, workers: 1,
            args: ['--upstream-type', type, '--prefix-routing-header', header]});
        const r = await proxy.post(CHAT, conversation(h.uniq('once'), 1), NO_STORE);
        assert.equal(r.status, 200, r.text);
        const rec = reps[0].requests().slice(-1)[0];
        assert.match(rec.headers[header.toLowerCase()], /^pc-[0-9a-f]{16}$/, `${type} ${header}`);
        await proxy.stop();
    }
}));

h.test('openai: prompt_cache_key names the conversation; the client\'s own is kept; bytes kept', async () => {
    const proxy = await env.startProxy({workers: 1});
    const topic = h.uniq('pck');
    await proxy.post(CHAT, conversation(topic, 1, 'gpt-4o-mini'), NO_STORE);
    const k1 = JSON.parse(env.mock.lastRequest(CHAT).rawBody).prompt_cache_key;
    await proxy.post(CHAT, conversation(topic, 2, 'gpt-4o-mini'), NO_STORE);
    const k2 = JSON.parse(env.mock.lastRequest(CHAT).rawBody).prompt_cache_key;
    assert.match(k1, /^pc-[0-9a-f]{16}$/);
    assert.equal(k2, k1, 'every turn of a conversation has the same key');
    /* The client's key stays, and a big integer keeps its digits. */
    const raw = `{"model":"gpt-4o-mini","seed":123456789012345678901,"prompt_cache_key":"mine",` +
        `"messages":[{"role":"user","content":"${h.uniq('raw')}"}]}`;
    const r = await proxy.request({method: 'POST', path: CHAT, body: raw,
        headers: {'content-type': 'application/json', ...NO_STORE}});
    assert.equal(r.status, 200);
    assert.equal(env.mock.lastRequest(CHAT).rawBody, raw);
    await proxy.stop();
});

h.test('anthropic: cache_control only on a prefix seen before, long enough; the client\'s kept', async () => {
    const proxy = await env.startProxy({workers: 1, args: ['--upstream-type', 'anthropic']});
    const system = `You review contracts. ${'clause '.repeat(900)}`;
    const turn = (n) => {
        const messages = [{role: 'user', content: 'first question'}];
        for (let i = 1; i < n; i++)
            messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `question ${i + 1}`});
        return {model: 'claude-sonnet-4-5', max_tokens: 16, system, messages};
    };
    await proxy.post(MESSAGES, turn(1), NO_STORE);
    const first = JSON.parse(env.mock.lastRequest(MESSAGES).rawBody);
    assert.equal(JSON.stringify(first).includes('cache_control'), false, 'never seen: no write premium');
    await proxy.post(MESSAGES, turn(2), NO_STORE);
    const second = JSON.parse(env.mock.lastRequest(MESSAGES).rawBody);
    assert.ok(Array.isArray(second.system));
    assert.deepEqual(second.system[0].cache_control, {type: 'ephemeral'});
    assert.equal(second.system[0].text, system);
    assert.equal(typeof second.messages[2].content, 'string', 'the new turn is not marked');
    /* The client's own breakpoint stays where it is. */
    const own = turn(2);
    own.messages[0] = {role: 'user', content: [{type: 'text', text: 'first question',
        cache_control: {type: 'ephemeral', ttl: '1h'}}]};
    await proxy.post(MESSAGES, own, NO_STORE);
    const third = JSON.parse(env.mock.lastRequest(MESSAGES).rawBody);
    assert.deepEqual(third.messages[0].content[0].cache_control, {type: 'ephemeral', ttl: '1h'});
    await proxy.stop();
});

/* The blocks carrying cache_control in the order Anthropic reads them, with their lifetimes. */
function anthropicMarks(body) {
    const marks = [];
    const walk = (v) => {
        if (v === null || typeof v !== 'object')
            return;
        if (!Array.isArray(v) && v.cache_control)
            marks.push(v.cache_control.ttl || '5m');
        Object.values(v).forEach(walk);
    };
    walk([body.tools, body.system, body.messages]);
    return marks;
}

h.test('anthropic: never more than 4 marks counting a tool_result\'s, never a 5-minute one before a 1h one', async () => {
    const proxy = await env.startProxy({workers: 1, args: ['--upstream-type', 'anthropic']});
    const long = (what) => `${what} ${'clause '.repeat(900)}`;
    const mark = {type: 'ephemeral'};
    /* Four marks of the client's own, one inside a tool_result: Anthropic refuses a fifth. */
    const tooling = (q) => ({model: 'claude-sonnet-4-5', max_tokens: 16,
        tools: [{name: 'lookup', description: long('tool'), input_schema: {type: 'object'}, cache_control: mark}],
        system: [{type: 'text', text: long('system'), cache_control: mark}],
        messages: [
            {role: 'user', content: [{type: 'text', text: long('first'), cache_control: mark}]},
            {role: 'assistant', content: [{type: 'tool_use', id: 'tu1', name: 'lookup', input: {}}]},
            {role: 'user', content: [{type: 'tool_result', tool_use_id: 'tu1',
                content: [{type: 'text', text: long('result'), cache_control: mark}]}]},
            {role: 'assistant', content: long('answer')},
            {role: 'user', content: q},
        ]});
    for (const q of ['question 1', 'question 2']) {
        assert.equal((await proxy.post(MESSAGES, tooling(q), NO_STORE)).status, 200);
        assert.equal(anthropicMarks(JSON.parse(env.mock.lastRequest(MESSAGES).rawBody)).length, 4);
    }
    /* The client caches its conversation for an hour: a 5-minute mark before that one is refused. */
    const hour = (n) => {
        const messages = [{role: 'user', content: long('first question')}];
        for (let i = 1; i < n; i++)
            messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `question ${i + 1}`});
        messages[messages.length - 1].content = [{type: 'text', text: messages[messages.length - 1].content,
            cache_control: {type: 'ephemeral', ttl: '1h'}}];
        return {model: 'claude-sonnet-4-5', max_tokens: 16, system: long('You review contracts.'), messages};
    };
    for (const n of [1, 2, 3]) {
        assert.equal((await proxy.post(MESSAGES, hour(n), NO_STORE)).status, 200);
        const marks = anthropicMarks(JSON.parse(env.mock.lastRequest(MESSAGES).rawBody));
        assert.equal(marks.lastIndexOf('1h'), marks.length - 1, `the client's mark kept: ${marks}`);
        assert.equal(marks.indexOf('5m'), -1, `a 5m mark before the 1h one: ${marks}`);
    }
    await proxy.stop();
});

h.test('streams ask upstream for usage; a client that did not ask never sees it', async () => {
    const proxy = await env.startProxy({workers: 1});
    const st0 = await proxy.stats();
    const body = {...h.chatBody(h.uniq('usage')), stream: true};
    const r = await proxy.post(CHAT, body);
    assert.equal(r.status, 200);
    const up = JSON.parse(env.mock.lastRequest(CHAT).rawBody);
    assert.deepEqual(up.stream_options, {include_usage: true});
    assert.ok(!r.text.includes('"usage"'), 'no usage chunk, no "usage": null');
    assert.ok(r.text.trim().endsWith('data: [DONE]'));
    const st1 = await proxy.stats();
    assert.ok(st1.tokens_upstream_prompt > st0.tokens_upstream_prompt, 'the recorded stream had usage');
    assert.equal(st1.stream_usage_added - st0.stream_usage_added, 1);
    /* The stored answer keeps its usage: replayed to a client that asks, it has it... */
    const withUsage = await proxy.post(CHAT, {...body, ...h.STREAM_WITH_USAGE});
    assert.equal(withUsage.headers['x-cache-status'], 'HIT');
    assert.match(withUsage.text, /"usage":\{"prompt_tokens"/);
    /* ...and to one that does not, it has none. */
    const again = await proxy.post(CHAT, body);
    assert.equal(again.headers['x-cache-status'], 'HIT');
    assert.ok(!again.text.includes('"usage"'));
    /* A client that asks itself gets upstream's usage chunk. */
    const asked = await proxy.post(CHAT, {...h.chatBody(h.uniq('asked')), ...h.STREAM_WITH_USAGE});
    assert.match(asked.text, /"usage":\{"prompt_tokens"/);
    await proxy.stop();
});

h.test('two proxy instances send the same prefix to the same replica', () => withPool(3, async (reps) => {
    const start = () => env.startProxy({upstream: reps.map((r) => r.url), workers: 2,
        args: ['--upstream-type', 'vllm']});
    const a = await start(), b = await start();
    const topic = h.uniq('two');
    /*
     * The other instance has a record once the tokens its index holds on the replica grow
     * (only this conversation reaches these replicas): a count of applied stream entries
     * misses a record that a reader still connecting restores from the replica's set.
     */
    const held = async (p) => (await p.stats()).replicas.find((x) => x.name === home).index_tokens;
    const r1 = await a.post(CHAT, conversation(topic, 1), NO_STORE);
    const home = r1.headers['x-upstream'];
    /* b learns of a's record through Redis (no request waits for it). */
    await h.waitFor(async () => (await held(b)) >= 1000, {what: 'b applying a\'s record'});
    for (let turn = 2; turn <= 5; turn++) {
        const proxy = turn % 2 ? a : b;
        const other = proxy === a ? b : a;
        const before = await held(other);
        const r = await proxy.post(CHAT, conversation(topic, turn), NO_STORE);
        assert.equal(r.headers['x-upstream'], home, `turn ${turn} through ${proxy === a ? 'a' : 'b'}`);
        await h.waitFor(async () => (await held(other)) > before, {what: 'the other instance applying the record'});
    }
    /* A third instance started now catches up from Redis. */
    const c = await start();
    await h.waitFor(async () => (await held(c)) >= 1000, {what: 'c restoring the index'});
    const r6 = await c.post(CHAT, conversation(topic, 6), NO_STORE);
    assert.equal(r6.headers['x-upstream'], home);
    const stB = await b.stats();
    assert.ok(stB.prefix_sync_published >= 2 && stB.prefix_sync_errors === 0, JSON.stringify(stB));
    await Promise.all([a.stop(), b.stop(), c.stop()]);
}));

h.test('a turn a replica never took is not shared with the other instances', () => withPool(2, async (reps) => {
    /*
     * Each instance takes back from its own index a turn the replica refused, but the record
     * went to the stream as the call was sent: the other instances believed the replica held
     * a conversation it never saw (and one that answered 400 did not compute either).
     */
    const start = () => env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
        args: ['--upstream-type', 'vllm', '--upstream-fail-timeout', '0']});
    const a = await start(), b = await start();
    const away = reps[0], live = reps[1];
    await away.close();
    const held = async (p, m) => replicaStats(await p.stats(), m).index_tokens;
    /* An answer of 400: the replica computed nothing. */
    const bad = conversation(h.uniq('never-bad'), 1);
    bad.max_tokens = 1e9;
    const rb = await a.post(CHAT, bad, NO_STORE);
    assert.equal(rb.status, 400, rb.text);
    assert.equal(rb.headers['x-upstream'], replicaName(live));
    assert.equal(await held(a, live), 0, 'the turn answered 400 is not held there');
    /* New conversations go by load, either replica first: asked until one was refused by the
     * closed replica (failed over), six at least. */
    for (let i = 0; i < 6 || (i < 60 && (await a.stats()).upstream_failovers < 1); i++) {
        const r = await a.post(CHAT, conversation(h.uniq(`never${i}`), 1), NO_STORE);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-upstream'], replicaName(live));
    }
    const stA = await a.stats();
    assert.ok(stA.upstream_failovers >= 1, JSON.stringify(stA));
    assert.equal(replicaStats(stA, away).index_tokens, 0);
    const want = replicaStats(stA, live).index_tokens;
    assert.ok(want > 0);
    /* b has every record a published once it holds what a holds on the live replica. */
    await h.waitFor(async () => (await held(b, live)) >= want, {what: 'b applying a\'s records'});
    assert.equal(await held(b, away), 0, 'the refused turns are not held there');
    assert.equal(await held(b, live), want, 'nor the turn answered 400');
    await Promise.all([a.stop(), b.stop()]);
}));

h.test('replicas whose names are alike in their first 255 bytes stay apart for the other instances', async () => {
    /*
     * A record carries the replica's name behind a length byte: cut to 255 bytes, two gateway
     * paths alike that far were one name, which no replica had, so no other instance ever
     * learned of a record on either.
     */
    const http = require('node:http');
    const gateway = http.createServer((req, res) => {
        req.resume();
        req.on('end', () => {
            const body = JSON.stringify({id: 'chatcmpl-gw', object: 'chat.completion', created: 1,
                model: 'mock-vllm', choices: [{index: 0, message: {role: 'assistant', content: 'ok'},
                    finish_reason: 'stop'}], usage: {prompt_tokens: 1200, completion_tokens: 1, total_tokens: 1201}});
            res.writeHead(200, {'content-type': 'application/json', 'content-length': Buffer.byteLength(body)});
            res.end(body);
        });
    });
    await new Promise((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    try {
        const base = `http://127.0.0.1:${gateway.address().port}/${'g'.repeat(300)}`;
        const urls = [`${base}/a`, `${base}/b`];
        const start = () => env.startProxy({upstream: urls, workers: 1, args: ['--upstream-type', 'vllm']});
        const a = await start(), b = await start();
        const names = (await a.stats()).replicas.map((x) => x.name);
        assert.ok(names[0].length > 255 && names[0] !== names[1], names.join(' '));
        const held = async (p, name) => (await p.stats()).replicas.find((x) => x.name === name).index_tokens;
        const r = await a.post(CHAT, conversation(h.uniq('longname'), 1), NO_STORE);
        assert.equal(r.status, 200, r.text);
        /* X-Upstream is cut shorter than these names: the index says where the call went. */
        const home = (await a.stats()).replicas.find((x) => x.index_tokens > 0).name;
        const other = names.find((x) => x !== home);
        const want = await held(a, home);
        assert.equal(await held(a, other), 0);
        await h.waitFor(async () => (await held(b, home)) === want, {what: 'b applying a\'s record'});
        assert.equal(await held(b, other), 0);
        await Promise.all([a.stop(), b.stop()]);
    } finally {
        gateway.close();
    }
});
