// A Java kafka-clients consumer with group.protocol=consumer (KIP-848) that prints one JSON line
// per rebalance callback, for tests/test_consumer_group_serve.py and the migration story
// (tests/support/migration_story.py). Runs until stdin closes.
// Usage: ConsumerProtocolMember BOOTSTRAP GROUP TOPIC CLIENT_ID [GROUP_INSTANCE_ID]
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ConsumerProtocolMember {
  static volatile boolean stopping = false;

  static synchronized void emit(String event, Collection<TopicPartition> partitions) {
    List<Integer> ids = new ArrayList<>();
    for (TopicPartition tp : partitions) ids.add(tp.partition());
    Collections.sort(ids);
    System.out.println("{\"event\": \"" + event + "\", \"partitions\": " + ids + "}");
    System.out.flush();
  }

  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("group.id", a[1]);
    p.put("client.id", a[3]);
    p.put("group.protocol", "consumer");
    if (a.length > 4) p.put("group.instance.id", a[4]);
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    p.put("enable.auto.commit", "true");
    p.put("auto.commit.interval.ms", "500");
    Thread stdin = new Thread(() -> {
      try {
        while (System.in.read() != -1) { }
      } catch (Exception e) { }
      stopping = true;
    });
    stdin.setDaemon(true);
    stdin.start();
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(Collections.singletonList(a[2]), new ConsumerRebalanceListener() {
        public void onPartitionsRevoked(Collection<TopicPartition> ps) { emit("revoked", ps); }
        public void onPartitionsAssigned(Collection<TopicPartition> ps) { emit("assigned", ps); }
      });
      while (!stopping) consumer.poll(Duration.ofMillis(100));
    }
    System.out.println("{\"event\": \"closed\", \"partitions\": []}");
    System.out.flush();
  }
}
