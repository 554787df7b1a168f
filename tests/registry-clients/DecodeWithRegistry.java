// Decodes Confluent-wire-format Avro records with Confluent's own Java client
// (kafka-avro-serializer / kafka-schema-registry-client 7.0.16) against a schema registry;
// run by tests/tests/registry.rs. Also exercises CachedSchemaRegistryClient directly.
//
//   java -cp "<classes>:<libs>/*" DecodeWithRegistry URL TOPIC KEYFILE VALUEFILE SUBJECT
//
// Prints four lines: the decoded key, the decoded value (Avro's JSON rendering of the
// generic records), the subject's latest version as "version id", and the subject list.

import io.confluent.kafka.schemaregistry.client.CachedSchemaRegistryClient;
import io.confluent.kafka.schemaregistry.client.SchemaMetadata;
import io.confluent.kafka.serializers.KafkaAvroDeserializer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.generic.GenericData;

public class DecodeWithRegistry {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        String topic = args[1];
        byte[] key = Files.readAllBytes(Paths.get(args[2]));
        byte[] value = Files.readAllBytes(Paths.get(args[3]));
        String subject = args[4];

        Map<String, Object> conf = new HashMap<>();
        conf.put("schema.registry.url", url);

        KafkaAvroDeserializer keyDes = new KafkaAvroDeserializer();
        keyDes.configure(conf, true);
        KafkaAvroDeserializer valueDes = new KafkaAvroDeserializer();
        valueDes.configure(conf, false);

        Object k = keyDes.deserialize(topic, key);
        Object v = valueDes.deserialize(topic, value);
        System.out.println(GenericData.get().toString(k));
        System.out.println(GenericData.get().toString(v));

        CachedSchemaRegistryClient client = new CachedSchemaRegistryClient(url, 16);
        SchemaMetadata latest = client.getLatestSchemaMetadata(subject);
        System.out.println(latest.getVersion() + " " + latest.getId());
        System.out.println(String.join(",", client.getAllSubjects()));
        keyDes.close();
        valueDes.close();
    }
}
