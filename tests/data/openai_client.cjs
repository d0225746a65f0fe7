// Drives `kvtax serve` with the official openai npm client; prints one JSON object with what it saw.
// Usage: NODE_PATH=<dir>/node_modules node openai_client.cjs http://127.0.0.1:PORT/v1
const OpenAI = require('openai');

async function main() {
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const out = {};
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a colour.' }];

  const whole = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 6, temperature: 0 });
  out.whole = { object: whole.object, content: whole.choices[0].message.content, role: whole.choices[0].message.role,
                finish: whole.choices[0].finish_reason, usage: whole.usage };

  const stream = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let content = '', chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length > 0) {
      content += chunk.choices[0].delta.content || '';
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  out.stream = { content, chunks, finish, usage };

  const comp = await client.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0 });
  out.completion = { object: comp.object, text: comp.choices[0].text, usage: comp.usage };

  try {
    await client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 2 });
    out.error = null;
  } catch (e) {
    out.error = { status: e.status, type: e.type || (e.error && e.error.type) || null };
  }
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
