package org.elasticsearch.node;

import java.util.List;

import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.IciclePluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsLoader;
import org.elasticsearch.plugins.PluginsService;

/**
 * IcicleNode is an unmodified Elasticsearch {@link Node} whose plugin service
 * also loads plugin classes that are already on the class path, so modules
 * that ship as plain jars (transport-netty4 from Maven Central) load without
 * the distribution's modules/ directory layout. Elasticsearch 9.5's API; the
 * 8.x twin has the same create method.
 *
 * The node runs without the distribution's launcher, so 9.x's entitlement
 * agent (which replaced the security manager) is not loaded: like the 8.x
 * node without its security manager, the process is trusted as a whole.
 *
 * It lives in org.elasticsearch.node because NodeConstruction and
 * NodeServiceProvider are package-private.
 */
public class IcicleNode extends Node {

    /** create builds (does not start) a node with the class-path plugins added. */
    public static Node create(Environment env, List<Class<? extends Plugin>> plugins) {
        return new IcicleNode(env, IciclePluginsService.emptyLoader(), plugins);
    }

    private IcicleNode(Environment environment, PluginsLoader loader, List<Class<? extends Plugin>> plugins) {
        super(NodeConstruction.prepareConstruction(environment, loader, new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, PluginsLoader l) {
                return new IciclePluginsService(env.settings(), env, l, plugins);
            }
        }, true));
    }

    @Override
    protected void configureNodeAndClusterIdStateListener(ClusterService clusterService) {
        // The stock listener feeds the server's logging layout with node and
        // cluster ids; our log4j configuration does not use them.
    }
}
