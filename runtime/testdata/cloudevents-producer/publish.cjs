// publish.cjs is a CloudEvents producer as a Node.js team would write one,
// with no Lily code: the CloudEvents SDK builds the events and amqplib
// publishes them, confirmed, to a queue. The SDK has no AMQP binding, so
// structured mode sends the SDK's own structured serialization, and binary
// mode puts each attribute in a cloudEvents_ header, as the AMQP binding
// says.
//
// Usage: node publish.cjs <amqp url> <queue> (NODE_PATH names the modules).
'use strict';

const amqp = require('amqplib');
const { CloudEvent, HTTP } = require('cloudevents');

const source = 'https://payments.acme.example/node';

async function main([url, queue]) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();

  const structured = HTTP.structured(new CloudEvent({
    id: 'node-1', source, type: 'com.acme.payment.authorized.v2', subject: 'order-node-1',
    datacontenttype: 'application/json', data: { payment_id: 'node-structured', amount_cents: 250 },
  }));
  ch.sendToQueue(queue, Buffer.from(structured.body), { contentType: structured.headers['content-type'], persistent: true });

  const binary = new CloudEvent({
    id: 'node-2', source, type: 'com.acme.payment.authorized.v1', subject: 'order-node-2',
    datacontenttype: 'application/json', data: { payment_id: 'node-binary' },
  });
  const headers = {};
  for (const [name, value] of Object.entries(binary)) {
    if (value !== undefined && name !== 'data' && name !== 'datacontenttype') {
      headers['cloudEvents_' + name] = value;
    }
  }
  ch.sendToQueue(queue, Buffer.from(JSON.stringify(binary.data)), { contentType: binary.datacontenttype, headers, persistent: true });

  await ch.waitForConfirms();
  await conn.close();
}

main(process.argv.slice(2)).catch((err) => {
  console.error(err);
  process.exit(1);
});
