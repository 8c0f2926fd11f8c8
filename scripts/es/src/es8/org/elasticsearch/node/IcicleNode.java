package org.elasticsearch.node;

import java.util.List;

import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.IciclePluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsService;

/**
 * IcicleNode is an unmodified Elasticsearch {@link Node} whose plugin service
 * also loads plugin classes that are already on the class path, so modules
 * that ship as plain jars (transport-netty4 from Maven Central) load without
 * the distribution's modules/ directory layout. Elasticsearch 8.x's API; the
 * 9.x twin has the same create method.
 *
 * It lives in org.elasticsearch.node because NodeConstruction and
 * NodeServiceProvider are package-private.
 */
public class IcicleNode extends Node {

    /** create builds (does not start) a node with the class-path plugins added. */
    public static Node create(Environment env, List<Class<? extends Plugin>> plugins) {
        return new IcicleNode(env, plugins);
    }

    private IcicleNode(Environment environment, List<Class<? extends Plugin>> plugins) {
        super(NodeConstruction.prepareConstruction(environment, new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, Settings settings) {
                return new IciclePluginsService(settings, env, plugins);
            }
        }, true));
    }

    @Override
    protected void configureNodeAndClusterIdStateListener(ClusterService clusterService) {
        // The stock listener feeds the server's logging layout with node and
        // cluster ids; our log4j configuration does not use them.
    }
}
