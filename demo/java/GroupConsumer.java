import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One Java kafka-clients consumer for the group-replay harness, printing JSON lines on stdout
 * (same contract as harness/consumer_main.py). Compiled with --release 8 against the oldest
 * supported kafka-clients, so one class runs on every version; groupMetadata() (2.5+) is called
 * by reflection and reported as null where it does not exist.
 *
 * <p>Usage: GroupConsumer BOOTSTRAP GROUP INSTANCE|- TOPIC[,TOPIC] SESSION_TIMEOUT_MS RUN_MS|-1 CLIENT_ID
 */
public final class GroupConsumer {
  private static volatile boolean stopping = false;
  private static volatile int exitCode = 0;

  private static String quote(String s) {
    if (s == null) return "null";
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
      else b.append(c);
    }
    return b.append('"').toString();
  }

  private static synchronized void emit(String event, String fields) {
    String rest = fields.isEmpty() ? "" : ", " + fields;
    System.out.println("{\"event\": " + quote(event) + ", \"ts_ms\": " + System.currentTimeMillis() + rest + "}");
    System.out.flush();
  }

  private static String partitions(Collection<TopicPartition> parts) {
    List<String> names = new ArrayList<>();
    for (TopicPartition tp : parts) names.add(tp.topic() + "-" + tp.partition());
    Collections.sort(names);
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < names.size(); i++) b.append(i == 0 ? "" : ", ").append(quote(names.get(i)));
    return b.append("]").toString();
  }

  /** generation_id and member_id from KafkaConsumer.groupMetadata() (kafka-clients 2.5+), else nulls. */
  private static String generation(KafkaConsumer<byte[], byte[]> consumer) {
    try {
      Method m = consumer.getClass().getMethod("groupMetadata");
      Object meta = m.invoke(consumer);
      Object gen = meta.getClass().getMethod("generationId").invoke(meta);
      Object member = meta.getClass().getMethod("memberId").invoke(meta);
      int g = ((Integer) gen).intValue();
      return "\"generation_id\": " + (g < 0 ? "null" : String.valueOf(g)) + ", \"member_id\": "
          + (member == null || "".equals(member) ? "null" : quote(member.toString()));
    } catch (Throwable t) {
      return "\"generation_id\": null, \"member_id\": null";
    }
  }

  public static void main(String[] a) throws Exception {
    if (a.length != 7) {
      System.err.println("usage: GroupConsumer BOOTSTRAP GROUP INSTANCE|- TOPICS SESSION_TIMEOUT_MS RUN_MS CLIENT_ID");
      System.exit(2);
    }
    String instance = "-".equals(a[2]) ? null : a[2];
    int sessionTimeoutMs = Integer.parseInt(a[4]);
    long runMs = Long.parseLong(a[5]);
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("group.id", a[1]);
    if (instance != null) p.put("group.instance.id", instance);
    p.put("client.id", a[6]);
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    p.put("auto.offset.reset", "earliest");
    p.put("enable.auto.commit", "false");
    p.put("session.timeout.ms", String.valueOf(sessionTimeoutMs));
    p.put("heartbeat.interval.ms", String.valueOf(Math.max(100, sessionTimeoutMs / 5)));
    p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
    // Extra client settings (security.protocol, ssl.*, sasl.*) from a properties file, when given.
    String extra = System.getProperty("group.replay.client.properties");
    if (extra != null) {
      try (java.io.FileInputStream in = new java.io.FileInputStream(extra)) {
        p.load(in);
      }
    }

    final KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
    final CountDownLatch closed = new CountDownLatch(1);
    final Thread mainThread = Thread.currentThread();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      stopping = true;
      consumer.wakeup();
      try {
        closed.await();
      } catch (InterruptedException e) {
        mainThread.interrupt();
      }
      // The consumer closed: exit with its own code rather than the JVM's 143 for SIGTERM.
      System.out.flush();
      Runtime.getRuntime().halt(exitCode);
    }));
    emit("started", "\"kind\": \"java\", \"client_id\": " + quote(a[6]) + ", \"group_instance_id\": " + quote(instance));
    try {
      consumer.subscribe(Arrays.asList(a[3].split(",")), new ConsumerRebalanceListener() {
        public void onPartitionsRevoked(Collection<TopicPartition> ps) {
          emit("revoked", "\"partitions\": " + partitions(ps));
        }

        public void onPartitionsAssigned(Collection<TopicPartition> ps) {
          emit("assigned", "\"partitions\": " + partitions(ps) + ", " + generation(consumer));
        }
      });
      long end = runMs < 0 ? Long.MAX_VALUE : System.currentTimeMillis() + runMs;
      while (!stopping && System.currentTimeMillis() < end) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
        if (!records.isEmpty()) emit("records", "\"count\": " + records.count());
      }
    } catch (WakeupException e) {
      // shutdown hook asked us to stop
    } catch (Throwable t) {
      exitCode = 1;
      emit("error", "\"message\": " + quote(t.toString()));
    } finally {
      try {
        consumer.close();
      } finally {
        emit("closed", "");
        closed.countDown();
      }
    }
    System.exit(exitCode);
  }
}
