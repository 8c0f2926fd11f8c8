package org.elasticsearch.plugins;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.elasticsearch.Version;
import org.elasticsearch.action.admin.cluster.node.info.PluginsAndModules;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;

/**
 * IciclePluginsService is the stock PluginsService over an empty plugin
 * loader (the distribution's modules/ and plugins/ bundles do not exist here)
 * plus a fixed list of plugin classes that are already on the class path.
 * Elasticsearch 9.5's API; the 8.x twin scans the empty directories itself.
 *
 * It lives in org.elasticsearch.plugins because LoadedPlugin, loadPlugin and
 * loadExtensions are package-private.
 */
public class IciclePluginsService extends PluginsService {

    private final List<LoadedPlugin> all;
    private final PluginsAndModules info;

    public IciclePluginsService(Settings settings, Environment env, PluginsLoader loader,
            List<Class<? extends Plugin>> classes) {
        super(settings, env.configDir(), loader);
        List<LoadedPlugin> loaded = new ArrayList<>();
        List<PluginRuntimeInfo> infos = new ArrayList<>(super.info().getPluginInfos());
        for (Class<? extends Plugin> c : classes) {
            PluginDescriptor d = new PluginDescriptor(
                c.getName(), "class path module", Version.CURRENT.toString(), Version.CURRENT.toString(),
                Integer.toString(Runtime.version().feature()), c.getName(), null, List.of(),
                false, false, false, false, PluginDescriptor.DeploymentTarget.ALL);
            loaded.add(new LoadedPlugin(d, loadPlugin(c, settings, env.configDir()), c.getClassLoader()));
            infos.add(new PluginRuntimeInfo(d));
        }
        loadExtensions(loaded);
        loaded.addAll(super.plugins());
        this.all = List.copyOf(loaded);
        this.info = new PluginsAndModules(infos, super.info().getModuleInfos());
    }

    /**
     * emptyLoader is a plugin loader with no bundles. The server runs from the
     * class path (unnamed module), so there are no qualified exports to wire.
     */
    public static PluginsLoader emptyLoader() {
        return PluginsLoader.createPluginsLoader(Set.of(), Set.of(), Map.of(), false);
    }

    @Override
    protected final List<LoadedPlugin> plugins() {
        return all;
    }

    @Override
    public PluginsAndModules info() {
        return info;
    }
}
