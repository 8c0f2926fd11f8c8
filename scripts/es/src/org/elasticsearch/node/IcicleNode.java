package org.elasticsearch.node;

import java.util.function.Function;

import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.PluginsService;

/**
 * IcicleNode is an unmodified Elasticsearch {@link Node} whose plugin service
 * is supplied by the caller, so modules that ship as plain jars on the class
 * path (transport-netty4 from Maven Central) can be loaded without the
 * distribution's modules/ directory layout.
 *
 * It lives in org.elasticsearch.node because NodeConstruction and
 * NodeServiceProvider are package-private.
 */
public class IcicleNode extends Node {

    public IcicleNode(Environment environment, Function<Settings, PluginsService> plugins) {
        super(NodeConstruction.prepareConstruction(environment, new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, Settings settings) {
                return plugins.apply(settings);
            }
        }, true));
    }

    @Override
    protected void configureNodeAndClusterIdStateListener(ClusterService clusterService) {
        // The stock listener feeds the server's logging layout with node and
        // cluster ids; our log4j configuration does not use them.
    }
}
