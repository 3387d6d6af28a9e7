// cpudl's modules, optimisers, datasets and files in Python. The layers are the C++ ones
// (PyTorch's initialisation and parameter names, fused forward paths); python/cpudl/nn wraps them
// in a torch.nn-shaped Module that Python code can subclass.
#include <pybind11/stl.h>

#include <filesystem>

#include "cpudl/data.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "cpudl/optim.h"
#include "python/bindings.h"

namespace cpudl::python {
namespace {

namespace fs = std::filesystem;

py::dict named_dict(const nn::NamedTensors& named) {
  py::dict d;
  for (const auto& [name, t] : named) d[py::str(name)] = t;
  return d;
}

nn::NamedTensors named_from_mapping(const py::object& mapping, const char* what) {
  if (!py::hasattr(mapping, "items"))
    throw py::type_error(std::string(what) + ": expected a dict of name -> Tensor");
  nn::NamedTensors named;
  for (const py::handle item : mapping.attr("items")()) {
    const auto pair = item.cast<py::tuple>();
    if (!py::isinstance<Tensor>(pair[1]))
      throw py::type_error(std::string(what) + ": '" + pair[0].cast<std::string>() + "' is a " +
                           std::string(py::str(py::type::of(pair[1]).attr("__name__"))) +
                           ", not a cpudl.Tensor");
    named.emplace_back(pair[0].cast<std::string>(), pair[1].cast<Tensor>());
  }
  return named;
}

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<nn::Module, std::shared_ptr<nn::Module>>(m, "_Module")
      .def(
          "forward", [](nn::Module& mod, const Tensor& x) { return mod.forward(x); }, ReleaseGil())
      .def("named_parameters", &nn::Module::named_parameters)
      .def("named_buffers", &nn::Module::named_buffers)
      .def("train", &nn::Module::train, py::arg("mode") = true)
      .def("is_training", &nn::Module::is_training);

  m.def("_linear", [](std::int64_t in, std::int64_t out, bool bias) -> nn::ModulePtr {
    return std::make_shared<nn::Linear>(in, out, bias);
  });
  m.def("_conv2d",
        [](std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
           bool bias, std::int64_t dilation, std::int64_t groups) -> nn::ModulePtr {
          return std::make_shared<nn::Conv2d>(in, out, kernel, stride, padding, bias, dilation, groups);
        });
  m.def("_batch_norm2d", [](std::int64_t channels, float eps, float momentum) -> nn::ModulePtr {
    return std::make_shared<nn::BatchNorm2d>(channels, eps, momentum);
  });
  m.def("_layer_norm", [](const Shape& shape, float eps) -> nn::ModulePtr {
    return std::make_shared<nn::LayerNorm>(shape, eps);
  });
  m.def("_embedding", [](std::int64_t num, std::int64_t dim) -> nn::ModulePtr {
    return std::make_shared<nn::Embedding>(num, dim);
  });
  m.def("_dropout", [](float p) -> nn::ModulePtr { return std::make_shared<nn::Dropout>(p); });
  m.def("_make_model", &nn::make_model, py::arg("name"), py::arg("num_classes") = 10,
        py::arg("in_channels") = 1, py::arg("cifar_stem") = true, py::arg("mlp_inputs") = 0);
  m.def("model_names", &nn::model_names, "The names cpudl.nn.zoo() takes.");

  // ---- optimisers
  py::class_<optim::Optimizer>(m, "_Optimizer")
      .def("step", &optim::Optimizer::step, ReleaseGil())
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("steps", &optim::Optimizer::steps)
      .def("state_dict", [](const optim::Optimizer& o) { return named_dict(o.state_dict()); })
      .def("load_state_dict", [](optim::Optimizer& o, const py::object& state) {
        o.load_state_dict(named_from_mapping(state, "load_state_dict"));
      });
  py::class_<optim::Sgd, optim::Optimizer>(m, "_Sgd").def(
      py::init([](std::vector<Tensor> params, float lr, float momentum, float dampening, float weight_decay,
                  bool nesterov) {
        return std::make_unique<optim::Sgd>(
            std::move(params), optim::SgdOptions{lr, momentum, dampening, weight_decay, nesterov});
      }));
  py::class_<optim::Adam, optim::Optimizer>(m, "_Adam")
      .def(py::init([](std::vector<Tensor> params, float lr, float beta1, float beta2, float eps,
                       float weight_decay, bool decoupled) {
        return std::make_unique<optim::Adam>(
            std::move(params), optim::AdamOptions{lr, beta1, beta2, eps, weight_decay, decoupled});
      }));
  m.def("clip_grad_norm_", &optim::clip_grad_norm, py::arg("parameters"), py::arg("max_norm"), ReleaseGil(),
        "Scales gradients so that their global L2 norm is at most max_norm; returns the norm before.");

  // ---- data
  py::class_<data::Dataset>(m, "Dataset", "Images [N, C, H, W] (float32, normalised) and labels [N] (int64).")
      .def_readonly("images", &data::Dataset::images)
      .def_readonly("labels", &data::Dataset::labels)
      .def_readonly("kind", &data::Dataset::kind)
      .def_readonly("classes", &data::Dataset::classes)
      .def_readonly("mean", &data::Dataset::mean)
      .def_readonly("std", &data::Dataset::std)
      .def("__len__", [](const data::Dataset& d) { return d.labels.size(0); });
  m.def(
      "_load_mnist",
      [](const fs::path& dir, bool train, float mean, float std) {
        return data::load_mnist(dir, train, mean, std);
      },
      ReleaseGil());
  m.def(
      "_load_dataset",
      [](const std::filesystem::path& dir, bool train) { return data::load_dataset(dir, train); },
      ReleaseGil());
  py::class_<data::DataLoader>(m, "_DataLoader")
      .def(py::init([](const data::Dataset& d, std::int64_t batch, bool shuffle, bool drop_last,
                       std::uint64_t seed, int workers) {
             data::LoaderOptions o;
             o.batch = batch, o.shuffle = shuffle, o.drop_last = drop_last, o.seed = seed,
             o.workers = workers;
             return std::make_unique<data::DataLoader>(d, o);
           }),
           py::keep_alive<1, 2>())
      .def("start_epoch", &data::DataLoader::start_epoch, py::arg("epoch"), py::arg("skip") = 0, ReleaseGil())
      .def("next",
           [](data::DataLoader& l) -> py::object {
             Tensor x, y;
             bool more = false;
             {
               py::gil_scoped_release release;
               more = l.next(x, y);
             }
             if (!more) return py::none();
             return py::make_tuple(x, y);
           })
      .def("__len__", &data::DataLoader::batches_per_epoch);
  m.def("read_image", &data::read_image, py::arg("path"), ReleaseGil(),
        "A PGM or PNG file as a [C, H, W] float32 tensor in [0, 1].");

  // ---- files
  m.def(
      "load_safetensors",
      [](const fs::path& path) {
        io::SafetensorsFile file;
        {
          py::gil_scoped_release release;
          file = io::load_safetensors(path);
        }
        return named_dict(file.tensors);
      },
      py::arg("path"), "A safetensors file's tensors as a dict (file order), validated.");
  m.def(
      "save_safetensors",
      [](const fs::path& path, const py::object& tensors,
         const std::map<std::string, std::string>& metadata) {
        const nn::NamedTensors named = named_from_mapping(tensors, "save_safetensors");
        py::gil_scoped_release release;
        io::save_safetensors(path, named, metadata);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes tensors atomically (temporary file, fsync, rename): a failure never leaves half a file.");
  m.def("load_npy", &io::load_npy, py::arg("path"), ReleaseGil());
  m.def("save_npy", &io::save_npy, py::arg("path"), py::arg("tensor"), ReleaseGil());
}

}  // namespace cpudl::python
