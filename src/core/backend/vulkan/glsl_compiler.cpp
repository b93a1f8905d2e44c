#include "backend/vulkan/glsl_compiler.h"

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

#include <memory>
#include <mutex>
#include <stdexcept>

namespace meganeura::vk {

std::vector<uint32_t> compile_glsl_compute(const std::string& source) {
  static std::once_flag started;
  std::call_once(started, [] {
    if (!glslang_initialize_process()) throw std::runtime_error("[vulkan] the GLSL compiler could not start");
  });
  glslang_input_t in{};
  in.language = GLSLANG_SOURCE_GLSL;
  in.stage = GLSLANG_STAGE_COMPUTE;
  in.client = GLSLANG_CLIENT_VULKAN;
  in.client_version = GLSLANG_TARGET_VULKAN_1_1;
  in.target_language = GLSLANG_TARGET_SPV;
  in.target_language_version = GLSLANG_TARGET_SPV_1_3;
  in.code = source.c_str();
  in.default_version = 450;
  in.default_profile = GLSLANG_NO_PROFILE;
  in.messages = GLSLANG_MSG_DEFAULT_BIT;
  in.resource = glslang_default_resource();
  std::unique_ptr<glslang_shader_t, decltype(&glslang_shader_delete)> shader(glslang_shader_create(&in),
                                                                             glslang_shader_delete);
  if (!shader) throw std::runtime_error("[vulkan] the GLSL compiler could not start");
  if (!glslang_shader_preprocess(shader.get(), &in) || !glslang_shader_parse(shader.get(), &in))
    throw std::runtime_error(std::string("[vulkan] GLSL: ") + glslang_shader_get_info_log(shader.get()));
  std::unique_ptr<glslang_program_t, decltype(&glslang_program_delete)> program(glslang_program_create(),
                                                                                glslang_program_delete);
  glslang_program_add_shader(program.get(), shader.get());
  if (!glslang_program_link(program.get(), GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT))
    throw std::runtime_error(std::string("[vulkan] GLSL link: ") + glslang_program_get_info_log(program.get()));
  glslang_program_SPIRV_generate(program.get(), GLSLANG_STAGE_COMPUTE);
  if (const char* m = glslang_program_SPIRV_get_messages(program.get()); m && *m)
    throw std::runtime_error(std::string("[vulkan] SPIR-V generation: ") + m);
  std::vector<uint32_t> words(glslang_program_SPIRV_get_size(program.get()));
  glslang_program_SPIRV_get(program.get(), words.data());
  return words;
}

}  // namespace meganeura::vk
