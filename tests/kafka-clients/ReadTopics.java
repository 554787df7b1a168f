// Reads Kafka topics back with Apache Kafka's Java client (kafka-clients), as a Java
// consumer of the connector's output would: every partition from its start to its end,
// read_committed. Prints one JSON object per record, as read_topics.py does:
// {"topic", "partition", "offset", "key", "value", "headers": [[name, value], ...]}, keys,
// values and header values as UTF-8 text or null.
//
//   java -cp "<jars>/*:<classes>" ReadTopics HOST:PORT TOPIC [TOPIC ...]
//
// Compiled by tests/registry-clients/setup-java.sh; used by tests/tests/kafka_log.rs.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ReadTopics {
    static String text(byte[] b) {
        if (b == null) return "null";
        String s = new String(b, StandardCharsets.UTF_8);
        StringBuilder o = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': o.append("\\\""); break;
                case '\\': o.append("\\\\"); break;
                case '\n': o.append("\\n"); break;
                case '\r': o.append("\\r"); break;
                case '\t': o.append("\\t"); break;
                default:
                    if (c < 0x20) o.append(String.format("\\u%04x", (int) c));
                    else o.append(c);
            }
        }
        return o.append('"').toString();
    }

    public static void main(String[] args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", "cdc-test-java-reader");
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", "read_committed");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (int i = 1; i < args.length; i++) {
                List<PartitionInfo> info = c.partitionsFor(args[i], Duration.ofSeconds(30));
                if (info == null) continue;
                for (PartitionInfo pi : info) parts.add(new TopicPartition(pi.topic(), pi.partition()));
            }
            if (parts.isEmpty()) return;
            c.assign(parts);
            c.seekToBeginning(parts);
            // read_committed: the end is the last stable offset.
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            long deadline = System.currentTimeMillis() + 60_000;
            StringBuilder out = new StringBuilder();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : parts) if (c.position(tp) < end.get(tp)) done = false;
                if (done) break;
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("timed out before the end of " + parts);
                    System.exit(3);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    out.append("{\"topic\": ").append(text(r.topic().getBytes(StandardCharsets.UTF_8)))
                        .append(", \"partition\": ").append(r.partition())
                        .append(", \"offset\": ").append(r.offset())
                        .append(", \"key\": ").append(text(r.key()))
                        .append(", \"value\": ").append(text(r.value()))
                        .append(", \"headers\": [");
                    boolean first = true;
                    for (Header h : r.headers()) {
                        if (!first) out.append(", ");
                        first = false;
                        out.append('[').append(text(h.key().getBytes(StandardCharsets.UTF_8)))
                            .append(", ").append(text(h.value())).append(']');
                    }
                    out.append("]}\n");
                }
            }
            System.out.print(out);
        }
    }
}
