package org.icicle.esnode;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.node.IcicleNode;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.transport.netty4.Netty4Plugin;

/**
 * Main starts one Elasticsearch node in this JVM and keeps it until the
 * process gets SIGTERM/SIGINT, when a shutdown hook closes the node cleanly.
 *
 * Arguments are node settings as key=value (path.home, path.data, http.port,
 * ...). path.home must contain config/log4j2.properties; scripts/es.sh
 * writes it. With -Dicicle.pidfile=PATH the JVM writes its pid there before
 * the node is built and removes it after the node has closed.
 *
 * This file compiles against Elasticsearch 8.x and 9.x alike; what differs
 * between the majors (node construction, plugin loading, the REST handler
 * registration) lives in src/es8 and src/es9, one twin per class.
 */
public final class Main {

    private Main() {}

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            // Node threads are not daemons: without an explicit exit a failed
            // start would leave a half-built JVM running.
            System.err.println("icicle-es: node failed to start");
            t.printStackTrace();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        Settings.Builder b = Settings.builder();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("argument " + a + ": want key=value");
            }
            b.put(a.substring(0, eq), a.substring(eq + 1));
        }
        Settings settings = b.build();
        String pidProp = System.getProperty("icicle.pidfile");
        Path pidFile = pidProp == null ? null : Path.of(pidProp);
        if (pidFile != null) {
            Files.writeString(pidFile, ProcessHandle.current().pid() + "\n");
        }
        Path home = Path.of(settings.get("path.home"));
        Path config = home.resolve("config");
        Files.createDirectories(home.resolve("modules"));
        Files.createDirectories(home.resolve("plugins"));

        Environment env = InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), config,
            () -> settings.get("node.name", "icicle-es"));
        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName(Node.NODE_NAME_SETTING.get(env.settings()));
        LogConfigurator.configure(env, true);

        List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, RootPlugin.class);
        Node node = IcicleNode.create(env, plugins);

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                node.awaitClose(30, java.util.concurrent.TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                if (pidFile != null) {
                    try {
                        Files.deleteIfExists(pidFile);
                    } catch (java.io.IOException e) {
                        e.printStackTrace();
                    }
                }
                stopped.countDown();
            }
        }, "icicle-es-shutdown"));
        node.start();
        System.out.println("icicle-es: node started");
        stopped.await();
    }
}
