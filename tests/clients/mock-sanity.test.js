'use strict';
/*
 * The mock upstream speaks the real wire formats: the official OpenAI and
 * Anthropic SDKs, pointed straight at it, parse every kind of answer it
 * gives (JSON and streams, text and tool calls, usage, errors). Needs no
 * proxy binary.
 */
const {test, before, after} = require('node:test');
const assert = require('node:assert/strict');
const {createMock} = require('../mock/upstream');
const sdk = require('./sdk');

let mock;
let oa;
let an;

before(async () => {
    mock = await createMock().listen(0, '127.0.0.1');
    oa = sdk.openai(mock.url);
    an = sdk.anthropic(mock.url);
});
after(() => mock.close());

const ANSWER = /^mock answer #\d+ to: /;
const user = (content) => [{role: 'user', content}];

/* ------------------------------------------------------------------------ */
/* OpenAI                                                                    */

test('openai: chat completion with usage', async () => {
    const {data, response} = await oa.chat.completions
        .create({model: 'gpt-4o-mini', messages: user('Say hello to the mock')}).withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.object, 'chat.completion');
    assert.match(data.choices[0].message.content, /^mock answer #\d+ to: Say hello to the mock$/);
    assert.equal(data.choices[0].finish_reason, 'stop');
    const u = data.usage;
    assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert.equal(u.prompt_tokens_details.cached_tokens, 0);
    assert.match(data._request_id, /^req_mock\d+$/);
    assert.equal(mock.lastRequest().headers.authorization, 'Bearer sk-client-test-openai');
});

test('openai: each call gets a distinct answer, quoting the last user message', async () => {
    const ask = () => oa.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{role: 'user', content: 'first'}, {role: 'assistant', content: 'ok'},
            {role: 'user', content: [{type: 'text', text: 'second question'}]}],
    });
    const [a, b] = [await ask(), await ask()];
    assert.notEqual(a.choices[0].message.content, b.choices[0].message.content);
    assert.match(a.choices[0].message.content, /to: second question$/);
});

test('openai: chat completion with a tool call', async () => {
    const data = await oa.chat.completions.create({
        model: 'gpt-4o-mini', messages: user('Weather in Paris?'), tools: [sdk.OPENAI_TOOL],
    });
    const choice = data.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.equal(typeof args.days, 'number');
});

test('openai: streamed chat completion with include_usage', async () => {
    const stream = await oa.chat.completions.create({
        model: 'gpt-4o-mini', messages: user('Stream to me'), stream: true,
        stream_options: {include_usage: true},
    }, {headers: {'x-mock-chunks': '6'}});
    const got = await sdk.collectChatStream(stream);
    assert.match(got.text, /^mock answer #\d+ to: Stream to me$/);
    assert.equal(got.finish, 'stop');
    assert.ok(got.usage && got.usage.total_tokens > 0, 'usage chunk');
    assert.equal(got.usageInOtherChunks, false);
    assert.equal(got.chunks, 1 + 6 + 1 + 1, 'role chunk, 6 pieces, finish chunk, usage chunk');
});

test('openai: stream helper assembles text and tool calls', async () => {
    const text = await oa.chat.completions
        .stream({model: 'gpt-4o-mini', messages: user('Helper text')}).finalChatCompletion();
    assert.match(text.choices[0].message.content, /^mock answer #\d+ to: Helper text$/);

    const tool = await oa.chat.completions.stream({
        model: 'gpt-4o-mini', messages: user('Helper tool'), tools: [sdk.OPENAI_TOOL],
        stream_options: {include_usage: true},
    }).finalChatCompletion();
    const call = tool.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
    assert.equal(tool.choices[0].finish_reason, 'tool_calls');
    assert.ok(tool.usage.total_tokens > 0);
});

test('openai: legacy completions, JSON and stream', async () => {
    const data = await oa.completions.create({model: 'gpt-3.5-turbo-instruct', prompt: 'Once upon'});
    assert.equal(data.object, 'text_completion');
    assert.match(data.choices[0].text, /^mock answer #\d+ to: Once upon$/);
    assert.ok(data.usage.total_tokens > 0);

    const stream = await oa.completions.create({
        model: 'gpt-3.5-turbo-instruct', prompt: 'Twice upon', stream: true,
        stream_options: {include_usage: true},
    });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
        text += chunk.choices.map((c) => c.text).join('');
        usage = chunk.usage || usage;
    }
    assert.match(text, /^mock answer #\d+ to: Twice upon$/);
    assert.ok(usage.total_tokens > 0);
});

test('openai: embeddings as floats and as base64 (the SDK default) agree', async () => {
    const input = ['alpha text', 'beta text'];
    const asBase64 = await oa.embeddings.create({model: 'text-embedding-3-small', input});
    assert.equal(mock.lastRequest().body.encoding_format, 'base64');
    const asFloat = await oa.embeddings.create({model: 'text-embedding-3-small', input, encoding_format: 'float'});
    assert.equal(asBase64.data.length, 2);
    assert.equal(asBase64.data[0].embedding.length, 8);
    assert.deepEqual(asBase64.data.map((d) => d.embedding), asFloat.data.map((d) => d.embedding));
    assert.notDeepEqual(asFloat.data[0].embedding, asFloat.data[1].embedding);
    assert.ok(asFloat.usage.prompt_tokens > 0);
});

test('openai: models list', async () => {
    const ids = [];
    for await (const m of oa.models.list())
        ids.push(m.id);
    assert.ok(ids.includes('gpt-4o-mini'));
});

test('openai: error statuses surface as the SDK\'s error classes', async () => {
    const ask = (status) => oa.chat.completions.create({model: 'gpt-4o-mini', messages: user('err')},
        {headers: {'x-mock-status': String(status)}});
    await assert.rejects(ask(400), (e) => e instanceof sdk.OpenAI.BadRequestError &&
        /mock error 400/.test(e.message) && e.error.type === 'invalid_request_error');
    await assert.rejects(ask(429), sdk.OpenAI.RateLimitError);
    await assert.rejects(ask(500), sdk.OpenAI.InternalServerError);
    await assert.rejects(oa.post('/nowhere', {body: {}}), sdk.OpenAI.NotFoundError);
});

test('openai responses: create, with usage and the request id', async () => {
    const {data, response} = await oa.responses.create({model: 'gpt-4.1-mini', instructions: 'Be brief.',
        input: 'Say hello to the mock'}).withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.object, 'response');
    assert.equal(data.status, 'completed');
    assert.match(data.output_text, /^mock answer #\d+ to: Say hello to the mock$/);
    assert.equal(data.instructions, 'Be brief.');
    const u = data.usage;
    assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
    assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
    assert.match(data._request_id, /^req_mock\d+$/);
});

test('openai responses: the stream helper accumulates text, tool calls and reasoning', async () => {
    const s = oa.responses.stream({model: 'o4-mini', input: [{role: 'user',
        content: [{type: 'input_text', text: 'Weather in Paris?'}]}], tools: [{type: 'function',
        name: 'get_weather', parameters: {type: 'object', properties: {city: {type: 'string'}}}}],
    reasoning: {effort: 'low', summary: 'auto'}});
    const types = [];
    let args = '';
    s.on('event', (e) => types.push(e.type));
    s.on('response.function_call_arguments.delta', (e) => (args = e.snapshot));
    const final = await s.finalResponse();
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.ok(types.includes('response.reasoning_summary_text.delta'));
    const [reasoning, call] = final.output;
    assert.equal(reasoning.type, 'reasoning');
    assert.match(reasoning.summary[0].text, /^mock reasoning/);
    assert.equal(call.type, 'function_call');
    assert.equal(args, call.arguments, 'the deltas add up to the arguments');
    assert.match(JSON.parse(call.arguments).city, /^call #\d+/);
    const text = oa.responses.stream({model: 'gpt-4.1-mini', input: 'plain text please'});
    const deltas = [];
    text.on('response.output_text.delta', (e) => deltas.push(e.delta));
    const done = await text.finalResponse();
    assert.ok(deltas.length > 1);
    assert.equal(deltas.join(''), done.output[0].content[0].text);
});

test('openai responses: previous_response_id resolves for its owner only; background is queued', async () => {
    const first = await oa.responses.create({model: 'gpt-4.1-mini', input: 'first'});
    const next = await oa.responses.create({model: 'gpt-4.1-mini', input: 'next',
        previous_response_id: first.id});
    assert.equal(next.previous_response_id, first.id);
    const stranger = sdk.openai(mock.url, 'sk-someone-else');
    const err = await stranger.responses.create({model: 'gpt-4.1-mini', input: 'x',
        previous_response_id: first.id}).then(() => null, (e) => e);
    assert.ok(err instanceof sdk.OpenAI.NotFoundError);
    assert.equal(err.code, 'previous_response_not_found');
    const unstored = await oa.responses.create({model: 'gpt-4.1-mini', input: 'x', store: false});
    assert.equal(mock.knowsResponse(unstored.id), false, 'store: false keeps nothing');
    const bg = await oa.responses.create({model: 'gpt-4.1-mini', input: 'later', background: true});
    assert.equal(bg.status, 'queued');
    assert.deepEqual(bg.output, []);
});

/* ------------------------------------------------------------------------ */
/* Anthropic                                                                 */

test('anthropic: message with usage', async () => {
    const {data, response} = await an.messages
        .create({model: 'claude-sonnet-4-5', max_tokens: 256, messages: user('Hello Claude mock')})
        .withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.type, 'message');
    assert.equal(data.content[0].type, 'text');
    assert.match(data.content[0].text, /^mock answer #\d+ to: Hello Claude mock$/);
    assert.equal(data.stop_reason, 'end_turn');
    assert.ok(data.usage.input_tokens > 0 && data.usage.output_tokens > 0);
    assert.equal(data._request_id, response.headers.get('request-id'));
    /* SDK 1.x sends the API key as a bearer token; older ones used x-api-key. */
    const got = mock.lastRequest().headers;
    assert.ok(got['x-api-key'] === 'sk-ant-client-test' || got.authorization === 'Bearer sk-ant-client-test',
        `credential sent: ${JSON.stringify(got)}`);
    assert.ok(got['anthropic-version']);
});

test('anthropic: message with a tool_use block', async () => {
    const data = await an.messages.create({
        model: 'claude-sonnet-4-5', max_tokens: 256, messages: user('Weather in Oslo?'),
        tools: [sdk.ANTHROPIC_TOOL],
    });
    assert.equal(data.stop_reason, 'tool_use');
    const block = data.content.find((b) => b.type === 'tool_use');
    assert.equal(block.name, 'get_weather');
    assert.equal(typeof block.input.city, 'string');
});

test('anthropic: messages.stream assembles the same kind of message', async () => {
    const stream = an.messages.stream({model: 'claude-sonnet-4-5', max_tokens: 256,
        messages: user('Stream Claude')}, {headers: {'x-mock-chunks': '5'}});
    const pieces = [];
    stream.on('text', (t) => pieces.push(t));
    const msg = await stream.finalMessage();
    assert.equal(pieces.length, 5);
    assert.equal(pieces.join(''), msg.content[0].text);
    assert.match(msg.content[0].text, /^mock answer #\d+ to: Stream Claude$/);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.ok(msg.usage.output_tokens > 1, 'output_tokens from message_delta');
});

test('anthropic: messages.stream with a tool assembles the tool input', async () => {
    const msg = await an.messages.stream({model: 'claude-sonnet-4-5', max_tokens: 256,
        messages: user('Weather in Lima?'), tools: [sdk.ANTHROPIC_TOOL]}).finalMessage();
    assert.equal(msg.stop_reason, 'tool_use');
    const block = msg.content.find((b) => b.type === 'tool_use');
    assert.equal(typeof block.input.city, 'string');
});

test('anthropic: raw stream events come in the documented order', async () => {
    const stream = await an.messages.create({model: 'claude-sonnet-4-5', max_tokens: 256,
        messages: user('Raw events'), stream: true});
    const types = [];
    for await (const ev of stream)
        types.push(ev.type);
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.ok(types.includes('content_block_delta'));
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
});

test('anthropic: error statuses surface as the SDK\'s error classes', async () => {
    const ask = (status) => an.messages.create({model: 'claude-sonnet-4-5', max_tokens: 5,
        messages: user('err')}, {headers: {'x-mock-status': String(status)}});
    await assert.rejects(ask(400), (e) => e instanceof sdk.Anthropic.BadRequestError &&
        e.error.error.type === 'invalid_request_error' && /mock error 400/.test(e.message));
    await assert.rejects(ask(429), sdk.Anthropic.RateLimitError);
    await assert.rejects(ask(500), sdk.Anthropic.InternalServerError);
});
