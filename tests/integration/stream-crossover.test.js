'use strict';
/*
 * One cached answer serves both kinds of client: an answer first fetched as
 * an SSE stream is served as JSON and as a stream again, and an answer first
 * fetched as JSON is served as a stream (synthesised). Both directions, for
 * OpenAI chat (and legacy completions) and Anthropic messages, with text and
 * with tool calls. Streams must end properly ([DONE] / message_stop) and the
 * usage block must survive the round trip.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

const chatCore = (a) => ({role: a.role, content: a.content, tool_calls: a.tool_calls,
    finish_reason: a.finish_reason, usage: a.usage});

/* POST a streaming request; check it is a well-formed SSE answer and return its events. */
async function postStream(path, body, headers) {
    const res = await env.proxy.post(path, body, headers);
    assert.equal(res.status, 200, res.text.slice(0, 300));
    assert.match(String(res.headers['content-type']), /^text\/event-stream/);
    return {res, events: h.parseSSE(res.text)};
}

async function chatStream(body) {
    const {res, events} = await postStream(CHAT, {...body, ...h.STREAM_WITH_USAGE});
    const a = h.assembleChat(events);
    assert.ok(a.done, 'the stream ends with data: [DONE]');
    assert.equal(events[events.length - 1].data, '[DONE]', '[DONE] is the last event');
    return {res, a};
}

/* With include_usage: usage only in a last chunk with empty choices, null elsewhere. */
function assertUsageChunk(a) {
    const last = a.chunks[a.chunks.length - 1];
    assert.deepEqual(last.choices, [], 'the usage chunk has empty choices');
    assert.ok(last.usage && last.usage.total_tokens > 0, 'the usage chunk carries usage');
    for (const c of a.chunks.slice(0, -1))
        assert.ok(c.usage === null || c.usage === undefined, 'other chunks carry no usage');
}

async function messageStream(body) {
    const {res, events} = await postStream(MESSAGES, {...body, stream: true});
    const a = h.assembleMessage(events);
    assert.ok(a.done, 'the stream ends with message_stop');
    assert.equal(a.types[0], 'message_start');
    assert.equal(a.types[a.types.length - 1], 'message_stop');
    assert.equal(a.types[a.types.length - 2], 'message_delta');
    assert.deepEqual(a.errors, []);
    return {res, a};
}

/* ------------------------------------------------------------------------ */
/* OpenAI chat                                                               */

async function chatStreamThenJson(body) {
    const s = await chatStream(body);
    h.assertFromUpstream(s.res, env.mock);
    assertUsageChunk(s.a);
    const calls = env.mock.callCount(CHAT);

    const j = await env.proxy.post(CHAT, body);
    h.assertHit(j);
    assert.equal(j.json.object, 'chat.completion');
    assert.equal(j.json.model, s.a.model);
    assert.deepEqual(h.chatSummary(j.json), chatCore(s.a), 'JSON answer assembled from the stream');

    const again = await chatStream(body);
    h.assertHit(again.res);
    assertUsageChunk(again.a);
    assert.deepEqual(chatCore(again.a), chatCore(s.a), 'replayed stream carries the same answer');
    assert.equal(env.mock.callCount(CHAT), calls, 'served from the cache only');
}

async function chatJsonThenStream(body) {
    const j = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(j, env.mock);
    const calls = env.mock.callCount(CHAT);

    const s = await chatStream(body);
    h.assertHit(s.res);
    assertUsageChunk(s.a);
    assert.equal(s.a.model, j.json.model);
    assert.deepEqual(chatCore(s.a), h.chatSummary(j.json), 'stream synthesised from the JSON answer');
    assert.ok(s.a.chunks.every((c) => c.object === 'chat.completion.chunk'));
    assert.equal(env.mock.callCount(CHAT), calls);
    return {j, s};
}

h.test('chat: stream first, then JSON and stream again from the cache', async () => {
    await chatStreamThenJson(h.chatBody(h.uniq('stream first')));
});

h.test('chat: JSON first, then a stream from the cache', async () => {
    await chatJsonThenStream(h.chatBody(h.uniq('json first')));
});

h.test('chat: a cached answer streamed without include_usage carries no usage', async () => {
    const body = h.chatBody(h.uniq('no usage'));
    const j = await env.proxy.post(CHAT, body);
    const {res, events} = await postStream(CHAT, {...body, stream: true});
    h.assertHit(res);
    const a = h.assembleChat(events);
    assert.ok(a.done);
    assert.equal(a.content, h.chatText(j.json));
    assert.equal(a.usage, null, 'no chunk carries usage');
    assert.ok(a.chunks.every((c) => c.choices.length > 0), 'no usage-only chunk');
});

h.test('chat with tools: stream first, then JSON from the cache', async () => {
    await chatStreamThenJson(h.chatBody(h.uniq('weather in Paris'), {tools: [h.OPENAI_TOOL]}));
});

h.test('chat with tools: JSON first, then a stream from the cache', async () => {
    const {s} = await chatJsonThenStream(h.chatBody(h.uniq('weather in Rome'), {tools: [h.OPENAI_TOOL]}));
    assert.equal(s.a.finish_reason, 'tool_calls');
    assert.equal(s.a.tool_calls[0].name, 'get_weather');
});

/* ------------------------------------------------------------------------ */
/* Legacy completions                                                        */

h.test('completions: stream first, then JSON from the cache', async () => {
    const body = h.completionBody(h.uniq('Once upon a time'));
    const {res, events} = await postStream('/v1/completions', {...body, ...h.STREAM_WITH_USAGE});
    h.assertFromUpstream(res, env.mock);
    const a = h.assembleCompletion(events);
    assert.ok(a.done);
    const j = await env.proxy.post('/v1/completions', body);
    h.assertHit(j);
    assert.deepEqual(h.completionSummary(j.json),
        {text: a.text, finish_reason: a.finish_reason, usage: a.usage});
});

h.test('completions: JSON first, then a stream from the cache', async () => {
    const body = h.completionBody(h.uniq('In a galaxy'));
    const j = await env.proxy.post('/v1/completions', body);
    const {res, events} = await postStream('/v1/completions', {...body, ...h.STREAM_WITH_USAGE});
    h.assertHit(res);
    const a = h.assembleCompletion(events);
    assert.ok(a.done);
    assert.deepEqual({text: a.text, finish_reason: a.finish_reason, usage: a.usage},
        h.completionSummary(j.json));
});

/* ------------------------------------------------------------------------ */
/* Anthropic messages                                                        */

async function messageStreamThenJson(body) {
    const s = await messageStream(body);
    h.assertFromUpstream(s.res, env.mock);
    const calls = env.mock.callCount(MESSAGES);

    const j = await env.proxy.post(MESSAGES, body);
    h.assertHit(j);
    assert.equal(j.json.type, 'message');
    assert.equal(j.json.model, s.a.message.model);
    assert.deepEqual(h.messageSummary(j.json), h.messageSummary(s.a.message));

    const again = await messageStream(body);
    h.assertHit(again.res);
    assert.deepEqual(h.messageSummary(again.a.message), h.messageSummary(s.a.message));
    assert.equal(env.mock.callCount(MESSAGES), calls);
}

async function messageJsonThenStream(body) {
    const j = await env.proxy.post(MESSAGES, body);
    h.assertFromUpstream(j, env.mock);
    const calls = env.mock.callCount(MESSAGES);

    const s = await messageStream(body);
    h.assertHit(s.res);
    assert.equal(s.a.message.model, j.json.model);
    assert.deepEqual(h.messageSummary(s.a.message), h.messageSummary(j.json));
    for (const type of ['content_block_start', 'content_block_delta', 'content_block_stop'])
        assert.ok(s.a.types.includes(type), `the synthesised stream has ${type}`);
    assert.equal(env.mock.callCount(MESSAGES), calls);
    return s;
}

h.test('messages: stream first, then JSON and stream again from the cache', async () => {
    await messageStreamThenJson(h.messagesBody(h.uniq('stream first claude')));
});

h.test('messages: JSON first, then a stream from the cache', async () => {
    await messageJsonThenStream(h.messagesBody(h.uniq('json first claude')));
});

h.test('messages with tools: stream first, then JSON from the cache', async () => {
    await messageStreamThenJson(h.messagesBody(h.uniq('weather in Oslo'), {tools: [h.ANTHROPIC_TOOL]}));
});

h.test('messages with tools: JSON first, then a stream from the cache', async () => {
    const s = await messageJsonThenStream(
        h.messagesBody(h.uniq('weather in Lima'), {tools: [h.ANTHROPIC_TOOL]}));
    assert.equal(s.a.message.stop_reason, 'tool_use');
    const tool = s.a.message.content.find((b) => b.type === 'tool_use');
    assert.equal(tool.name, 'get_weather');
    assert.equal(typeof tool.input.city, 'string');
});

/*
 * Usage of a stream synthesised from a stored JSON answer, read the two ways
 * clients read it: the official SDK takes message_start's usage and lets
 * message_delta's members replace it (the stored usage exactly); LangChain's
 * ChatAnthropic adds the two events up. A live Anthropic stream starts with
 * the prompt's usage and a provisional output count of 1, so the adding-up
 * client gets the stored count plus that 1, as from Anthropic itself, not
 * twice the stored count.
 */
h.test('messages: a stream from a stored JSON answer counts its output tokens once', async () => {
    const body = h.messagesBody(h.uniq('usage once claude'));
    const j = await env.proxy.post(MESSAGES, body);
    h.assertFromUpstream(j, env.mock);
    const stored = j.json.usage;
    assert.ok(stored.output_tokens > 1, 'the mock answers with several output tokens');

    const {res, events} = await postStream(MESSAGES, {...body, stream: true});
    h.assertHit(res);
    const data = events.map((e) => JSON.parse(e.data));
    const start = data.find((d) => d.type === 'message_start').message.usage;
    const delta = data.find((d) => d.type === 'message_delta').usage;
    assert.deepEqual({...start, output_tokens: stored.output_tokens}, stored,
        'message_start carries the prompt\'s usage');
    assert.equal(start.output_tokens, 1, 'and a provisional output count, as Anthropic sends');
    assert.equal(delta.output_tokens, stored.output_tokens, 'message_delta has the final count');

    assert.deepEqual(h.assembleMessage(events).message.usage, stored, 'the SDK\'s reading');
    const sum = (name) => data.reduce((n, d) => {
        const u = d.type === 'message_start' ? d.message.usage : d.usage;
        return n + ((u && u[name]) || 0);
    }, 0);
    assert.equal(sum('input_tokens'), stored.input_tokens, 'input tokens counted once');
    assert.equal(sum('output_tokens'), stored.output_tokens + 1,
        'output tokens: the stored count once, plus the provisional 1');
});

/*
 * @ai-sdk/anthropic adds "eager_input_streaming": true to every tool of a
 * streamed call. It changes only how the tool input is streamed, so it is
 * left out of the key: the streamed call hits the entry of the plain one.
 */
h.test('messages with tools: eager_input_streaming does not split a stream from JSON', async () => {
    const body = h.messagesBody(h.uniq('weather in Quito'), {tools: [h.ANTHROPIC_TOOL]});
    const j = await env.proxy.post(MESSAGES, body);
    h.assertFromUpstream(j, env.mock);
    const calls = env.mock.callCount(MESSAGES);
    const eager = {...body, tools: [{...h.ANTHROPIC_TOOL, eager_input_streaming: true}]};
    const s = await messageStream(eager);
    h.assertHit(s.res);
    assert.equal(s.res.headers['x-cache-match'], 'exact');
    assert.deepEqual(h.messageSummary(s.a.message), h.messageSummary(j.json));
    assert.equal(env.mock.callCount(MESSAGES), calls, 'no second upstream call');

    /* the rest of a tool definition still counts */
    const other = {...body, tools: [{...h.ANTHROPIC_TOOL, description: 'Weather, briefly'}]};
    h.assertFromUpstream(await env.proxy.post(MESSAGES, other), env.mock);
});

/*
 * Audio output (gpt-4o-audio-preview, modalities ["text","audio"]): a live
 * stream carries message.audio in pieces (id and transcript first, then the
 * transcript and the base64 data in fragments, a last piece with expires_at
 * alone). A JSON client served from that recording gets the whole audio, as
 * the upstream's JSON answer would have it.
 */
/* The usage chunk a chat stream ends with when asked for usage (the proxy asks: stream-usage). */
const usageChunk = (id, model) => `data: ${JSON.stringify({id, object: 'chat.completion.chunk', created: 1, model,
    choices: [], usage: {prompt_tokens: 5, completion_tokens: 4, total_tokens: 9}})}\n\n`;

h.test('chat with audio: stream first, then JSON from the cache has the whole audio', async () => {
    const chunk = (delta, finish = null) => `data: ${JSON.stringify({id: 'chatcmpl-audio',
        object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-audio-preview',
        choices: [{index: 0, delta, finish_reason: finish}]})}\n\n`;
    const sse = chunk({role: 'assistant', content: null, refusal: null})
        + chunk({audio: {id: 'audio_abc', transcript: 'Hello'}})
        + chunk({audio: {transcript: ', world.'}})
        + chunk({audio: {data: 'UklGRg'}})
        + chunk({audio: {data: 'AAAA'}})
        + chunk({audio: {expires_at: 1760000000}})
        + chunk({}, 'stop')
        + usageChunk('chatcmpl-audio', 'gpt-4o-audio-preview')
        + 'data: [DONE]\n\n';
    const body = h.chatBody(h.uniq('audio stream'));
    const headers = {'x-mock-sse': Buffer.from(sse).toString('base64')};
    const s = await env.proxy.post(CHAT, {...body, stream: true}, headers);
    assert.equal(s.status, 200, s.text.slice(0, 300));
    const j = await env.proxy.post(CHAT, body, headers);
    h.assertHit(j);
    assert.deepEqual(j.json.choices[0].message.audio,
        {id: 'audio_abc', transcript: 'Hello, world.', data: 'UklGRgAAAA', expires_at: 1760000000});
    assert.equal(j.json.choices[0].message.content, null);
    assert.equal(j.json.choices[0].finish_reason, 'stop');
});

/*
 * OpenAI-compatible upstreams put more members at the top of an answer
 * (Perplexity: "citations" and "search_results", which the text's [1] refers
 * to; Azure: "prompt_filter_results"), in every chunk of a stream or in its
 * first. Served in the other mode they are kept: a JSON client gets them
 * from a recorded stream, a stream client in the first chunk of a stored
 * JSON answer (where the SDKs' stream helpers keep them from).
 */
const CITATIONS = ['https://example.com/a', 'https://example.com/b'];

h.test('chat: top-level members beyond OpenAI\'s survive a stream served as JSON', async () => {
    const chunk = (delta, finish = null) => `data: ${JSON.stringify({id: 'chatcmpl-cite', model: 'sonar',
        created: 1, citations: CITATIONS, search_results: [{title: 'A', url: CITATIONS[0]}],
        object: 'chat.completion.chunk', choices: [{index: 0, delta, finish_reason: finish}]})}\n\n`;
    const sse = chunk({role: 'assistant', content: 'Sunny [1]'}) + chunk({content: ' and warm [2].'})
        + chunk({}, 'stop') + usageChunk('chatcmpl-cite', 'sonar') + 'data: [DONE]\n\n';
    const body = h.chatBody(h.uniq('citations stream'));
    const headers = {'x-mock-sse': Buffer.from(sse).toString('base64')};
    assert.equal((await env.proxy.post(CHAT, {...body, stream: true}, headers)).status, 200);
    const j = await env.proxy.post(CHAT, body, headers);
    h.assertHit(j);
    assert.equal(j.json.choices[0].message.content, 'Sunny [1] and warm [2].');
    assert.deepEqual(j.json.citations, CITATIONS);
    assert.deepEqual(j.json.search_results, [{title: 'A', url: CITATIONS[0]}]);
    assert.equal(j.json.object, 'chat.completion');
});

h.test('chat: top-level members beyond OpenAI\'s survive a JSON answer served as a stream', async () => {
    const raw = JSON.stringify({id: 'chatcmpl-cite', object: 'chat.completion', created: 1, model: 'sonar',
        citations: CITATIONS, choices: [{index: 0, message: {role: 'assistant', content: 'Sunny [1].'},
            finish_reason: 'stop'}], usage: {prompt_tokens: 3, completion_tokens: 3, total_tokens: 6}});
    const body = h.chatBody(h.uniq('citations json'));
    assert.equal((await env.proxy.post(CHAT, body, {'x-mock-body': raw})).status, 200);
    const s = await env.proxy.post(CHAT, {...body, stream: true});
    h.assertHit(s);
    const chunks = h.parseSSE(s.text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    assert.deepEqual(chunks[0].citations, CITATIONS, 'in the first chunk');
    assert.ok(chunks.slice(1).every((c) => c.citations === undefined), 'once');
    assert.equal(h.assembleChat(h.parseSSE(s.text)).content, 'Sunny [1].');
});
